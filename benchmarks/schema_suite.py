#!/usr/bin/env python3
"""A suite of JSON Schemas for flover_server's constrained decoding, each
with a prompt SmolLM2-135M-Instruct answers sensibly, sent to
/v1/chat/completions with the official `openai` package (response_format
json_schema, strict). Together they use type unions, properties / required
/ additionalProperties (false and a schema), enum, const, anyOf, oneOf
(const discriminators), allOf (one branch), items, prefixItems, minItems /
maxItems, minLength / maxLength / pattern, the formats date, time,
date-time, uuid, email and ipv4, (exclusive) minimum / maximum, $ref /
$defs (a recursive linked list and folder tree), nullable members, nested
objects and arrays of objects: the features column is read from each
schema, and the run checks that the suite covers them all. Three ask the
model to copy values the formats forbid (February 30, 010.001.002.003,
12:30:60Z): the grammar must not let them out.

Each schema runs greedy and once per seed at temperature 1, --burst
requests in flight. An answer that finished ("stop": the grammar is
complete) must parse and validate with jsonschema's Draft202012Validator
and a FormatChecker whose six formats are checked strictly here (jsonschema's
own are loose or need optional packages): date and date-time only real
calendar days; time and date-time RFC 3339 with an offset, second 60 only
at 23:59 UTC; uuid 8-4-4-4-12; email RFC 5321's Mailbox ABNF, as JSON
Schema defines the format (a dot-atom or quoted local part, a domain of
letter-digit-hyphen labels; the ABNF sets no lengths); ipv4 what Python's
ipaddress takes (no leading zeros). Answers cut at max_tokens ("length") cannot be
validated: listed apart. A schema marked "refused" uses a keyword the
server refuses by design (docs/api.md, "Constrained output"): it must get
a 400, counted apart. Compile time: the first request with a schema
(max_tokens=1) less the same request again, cached (median of 3); indicative.

    tools/bazelw build //server:flover_server
    (tools/setup.sh puts jsonschema in .venv-test)
    .venv-test/bin/python benchmarks/schema_suite.py [--seeds=1,2,3] [--max_tokens=384] \\
        [--burst=16] [--threads=2] [--model=models/SmolLM2-135M-Instruct.Q4_1.gguf] \\
        [--only=NAME,...] [--dump=answers.jsonl]

Exit status 1 if a finished answer does not validate, or a schema is
refused (or accepted) against its mark."""
import argparse
import asyncio
import datetime
import importlib.metadata
import ipaddress
import json
import os
import re
import statistics
import sys
import time
import urllib.error
import urllib.request
import uuid

import jsonschema
import openai

from chat_serving import start, stop  # this folder's server helpers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVER = os.path.join(ROOT, ".bazel-root/bin/server/flover_server")  # what chat_serving.start runs


# ---- strict format checkers (other JSON types pass, as JSON Schema says) ----------
FORMATS = jsonschema.FormatChecker(formats=())
TIME = re.compile(r"(\d\d):(\d\d):(\d\d)(\.\d+)?(?:[Zz]|([+-])(\d\d):(\d\d))")
ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
EMAIL = re.compile(rf'(?:{ATOM}(?:\.{ATOM})*|"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\[\x20-\x7e])*")'
                   rf"@{LABEL}(?:\.{LABEL})*")
UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def strings(name):
    def register(check):
        FORMATS.checks(name, raises=ValueError)(lambda x: not isinstance(x, str) or check(x))
        return check
    return register


@strings("date")
def is_date(x):  # YYYY-MM-DD, a day the month has (RFC 3339 has a year 0000, Python not: as 2000, a leap year too)
    return re.fullmatch(r"\d{4}-\d\d-\d\d", x) is not None and \
        datetime.date.fromisoformat("2000" + x[4:] if x.startswith("0000") else x) is not None


@strings("time")
def is_time(x):  # RFC 3339 full-time: an offset, and second 60 only at 23:59 UTC
    m = TIME.fullmatch(x)
    if not m:
        return False
    h, mi, sec, oh, om = (int(g or 0) for g in (m[1], m[2], m[3], m[6], m[7]))
    utc = h * 60 + mi - (oh * 60 + om) * (-1 if m[5] == "-" else 1)
    return h < 24 and mi < 60 and oh < 24 and om < 60 and (sec < 60 or sec == 60 and utc % 1440 == 23 * 60 + 59)


@strings("date-time")
def is_date_time(x):
    m = re.fullmatch(r"([^Tt]*)[Tt](.*)", x)
    return bool(m) and is_date(m[1]) and is_time(m[2])


strings("uuid")(lambda x: UUID.fullmatch(x) is not None and uuid.UUID(x) is not None)
strings("ipv4")(lambda x: ipaddress.IPv4Address(x) is not None)
strings("email")(lambda x: EMAIL.fullmatch(x) is not None)


# ---- the suite ----------------------------------------------------------------
def obj(optional=(), **props):
    """An object of `props`, all required but `optional`, and nothing else."""
    return {"type": "object", "properties": props,
            "required": [k for k in props if k not in optional], "additionalProperties": False}


def arr(items, lo=None, hi=None):
    return {"type": "array", "items": items} | ({} if lo is None else {"minItems": lo}) | \
        ({} if hi is None else {"maxItems": hi})


s = lambda n=40, **kw: {"type": "string", "maxLength": n, **kw}  # noqa: E731
ns = lambda n: {"type": ["string", "null"], "maxLength": n}  # noqa: E731  (nullable)
i = lambda lo, hi: {"type": "integer", "minimum": lo, "maximum": hi}  # noqa: E731
num = lambda lo, hi, **kw: {"type": "number", "minimum": lo, "maximum": hi, **kw}  # noqa: E731
pos = lambda hi: {"type": "number", "exclusiveMinimum": 0, "maximum": hi}  # noqa: E731
f = lambda fmt: {"type": "string", "format": fmt}  # noqa: E731
pat = lambda p: {"type": "string", "pattern": p}  # noqa: E731
en = lambda *values: {"enum": list(values)}  # noqa: E731
ref = lambda name: {"$ref": f"#/$defs/{name}"}  # noqa: E731
NULL, BOOL = {"type": "null"}, {"type": "boolean"}
PERSON = obj(name=s(40), email=f("email"))

SUITE = [  # (name, prompt, schema[, "refused"])
    ("user", "Describe a fictional user as JSON: name, age, email, and a nickname (or null).",
     obj(name=s(40, minLength=1), age=i(0, 120), email=f("email"), nickname=ns(20))),
    ("order", "Give an online order as JSON: order id, customer, two or three line items with quantity and unit "
     "price, currency, and when it was placed.",
     obj(order_id=f("uuid"), customer=PERSON, currency=en("USD", "EUR", "GBP"), placed_at=f("date-time"),
         items=arr(obj(product=s(40), quantity={"type": "integer", "exclusiveMinimum": 0, "maximum": 20},
                       unit_price=pos(1000)), 1, 4))),
    ("event", "Describe a concert as JSON: title, date, start and end time (like 19:30:00Z), location, online or not.",
     obj(title=s(60), date=f("date"), start=f("time"), end=f("time"), location=s(60), online=BOOL,
         optional=["location"])),
    ("server_config", "Give a web server's config as JSON: host IP address, port, protocol, workers, a few tags.",
     obj(host=f("ipv4"), port=i(1, 65535), protocol=en("http", "https"), workers=i(1, 64), tags=arr(s(20), hi=4))),
    ("color", "Describe the color orange as JSON: its name, its RGB values as an array of three numbers, its hex code.",
     obj(name=s(30), rgb={"type": "array", "prefixItems": [i(0, 255)] * 3, "items": False, "minItems": 3},
         hex=pat("^#[0-9a-f]{6}$"))),
    ("place", "Describe Mount Fuji as JSON: name, latitude, longitude, elevation in meters (or null if unknown).",
     obj(name=s(40), latitude=num(-90, 90), longitude=num(-180, 180),
         elevation_m={"type": ["number", "null"], "minimum": -500, "maximum": 9000})),
    ("review", "Review headphones as JSON: product, stars from 1 to 5, a score out of 10, a verdict, a summary.",
     obj(product=s(40), stars=i(1, 5), score={"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 10},
         verdict=en("buy", "skip", "wait"), summary=s(120))),
    ("weather", "Give today's weather in London as JSON: city, unit, temperature, humidity in percent, conditions.",
     obj(version={"const": 2}, city=s(30), unit={"const": "celsius"}, temperature=num(-80, 60), humidity=i(0, 100),
         conditions=en("sunny", "cloudy", "rain", "snow"))),
    ("pet", "Describe a pet as JSON: a dog (name, breed, good boy or not) or a cat (name, indoor or not, lives left).",
     {"oneOf": [obj(kind={"const": "dog"}, name=s(30), breed=s(30), good_boy=BOOL),
                obj(kind={"const": "cat"}, name=s(30), indoor=BOOL, lives_left=i(0, 9))]}),
    ("payment", "Give a payment as JSON: amount, currency, and how it was paid, by card (last 4 digits, expiry "
     "MM/YY) or by bank transfer (IBAN).",
     obj(amount=pos(10000), currency=en("USD", "EUR"), payment={"anyOf": [
         obj(method={"const": "card"}, last4=pat("^[0-9]{4}$"), expiry=pat("^(0[1-9]|1[0-2])/[0-9]{2}$")),
         obj(method={"const": "bank"}, iban=pat("^[A-Z]{2}[0-9]{2}[A-Z0-9]{10,30}$"))]})),
    ("contact", "Give a contact as JSON: name, an email address or phone number, and the best time to call "
     "(like 18:00:00Z).",
     obj(name=s(40), contact={"anyOf": [f("email"), pat("^\\+[0-9]{7,15}$")]}, best_time=f("time"))),
    ("shipping", "Give a shipping label as JSON: the recipient, their postal address, and whether it is a gift.",
     {"$defs": {"address": obj(street=s(60), city=s(40), postcode=pat("^[0-9]{5}$"), country=en("US", "DE", "FR"))},
      **obj(recipient=s(40), address={"allOf": [ref("address")]}, gift=BOOL)}),
    ("linked_list", "Encode the list [3, 1, 4] as a JSON linked list: head is the node with value 3, its next is "
     "the node with value 1, whose next is the node with value 4, whose next is null.",
     {"$defs": {"node": obj(value=i(-1000, 1000), next={"anyOf": [ref("node"), NULL]})},
      **obj(name=s(30), head=ref("node"))}),
    ("folder_tree", "Describe a project folder as a JSON tree: the folder app holds README.md and main.py, and one "
     "child folder, tests, which holds test_main.py and has no child folders.",
     {"$defs": {"dir": obj(name=s(30), files=arr(s(30), hi=3), children=arr(ref("dir"), hi=3))},
      "$ref": "#/$defs/dir"}),
    ("book", "Describe a novel as JSON: title, ISBN, authors, publication date, pages, and its series (or null).",
     obj(title=s(60), isbn=pat("^97[89]-[0-9]{10}$"), authors=arr(s(40, minLength=1), 1, 3), published=f("date"),
         pages=i(1, 2000), series=ns(40))),
    ("meeting", "Schedule a meeting as JSON: topic, start date and time, duration in minutes, the attendees' "
     "emails, the room (or null).",
     obj(topic=s(60), start=f("date-time"), minutes={"type": "integer", "exclusiveMinimum": 0, "maximum": 480},
         attendees=arr(f("email"), 2, 4), room=ns(20))),
    ("session", "Give a login session as JSON: session id, user id, created and expiry times, scopes, client IP.",
     obj(session_id=f("uuid"), user_id=f("uuid"), created=f("date-time"), expires=f("date-time"),
         scopes=arr(en("read", "write", "admin"), hi=3), client_ip=f("ipv4"))),
    ("device", "Describe a router as JSON: hostname, IP address, gateway, MAC address, status, uptime in hours.",
     obj(hostname=pat("^[a-z][a-z0-9-]{0,20}$"), ip=f("ipv4"), gateway=f("ipv4"),
         mac=pat("^([0-9A-F]{2}:){5}[0-9A-F]{2}$"), status=en("up", "down"), uptime_hours=num(0, 100000))),
    ("recipe", "Give a pancake recipe as JSON: title, servings, ingredients with amount and unit, three short steps.",
     obj(title=s(50), servings=i(1, 12), steps=arr(s(80, minLength=5), 2, 5), ingredients=arr(
         obj(name=s(30), amount=pos(1000), unit=en("g", "ml", "cup", "tbsp", "tsp", "piece")), 2, 6))),
    ("todo", "Write a weekend to-do list as a JSON array: each task, done or not, a priority, a due date (or null).",
     arr(obj(task=s(50), done=BOOL, priority=en("low", "medium", "high"),
             due={"type": ["string", "null"], "format": "date"}), 2, 4)),
    ("matrix", "Give a 2 by 2 matrix of small integers as JSON with a name and its rows.",
     obj(name=s(20), rows=arr(arr(i(-9, 9), 2, 3), 2, 3))),
    ("employee", "Describe an employee as JSON: id, the person (name, email), their manager (or null), salary, "
     "start date, office address.",
     {"$defs": {"person": PERSON}, **obj(
         id=f("uuid"), person=ref("person"), manager={"anyOf": [ref("person"), NULL]}, start_date=f("date"),
         salary={"type": "integer", "minimum": 0, "exclusiveMaximum": 10**6}, office=obj(city=s(40), country=s(40)))}),
    ("log_entry", "Write a web server log entry as JSON: timestamp, level, message, source IP, request id, latency.",
     obj(timestamp=f("date-time"), level=en("DEBUG", "INFO", "WARN", "ERROR"), message=s(100),
         source_ip=f("ipv4"), request_id=f("uuid"), latency_ms=pos(60000))),
    ("shape", "Describe a shape as JSON: a circle (radius), rectangle (width, height) or triangle (3 sides), color.",
     obj(color=s(20), shape={"oneOf": [obj(type={"const": "circle"}, radius=pos(100)),
                                       obj(type={"const": "rectangle"}, width=pos(100), height=pos(100)),
                                       obj(type={"const": "triangle"}, sides=arr(pos(100), 3, 3))]})),
    ("setting", "Give an app setting as JSON: its key, its value (number, true/false, text or null), restart or not.",
     obj(key=pat("^[a-z_]{1,30}$"), value={"type": ["integer", "boolean", "string", "null"]}, restart=BOOL)),
    ("inventory", "Give a small shop's stock as JSON: the shop's name, then up to five product names with counts.",
     {"type": "object", "properties": {"shop": s(30)}, "required": ["shop"], "additionalProperties": i(0, 1000),
      "maxProperties": 6}),
    ("invoice", "Write an invoice as JSON: number, issue and due dates, items with prices, total, notes (or null).",
     {"$defs": {"money": obj(amount=num(0, 100000), currency=en("USD", "EUR"))},
      **obj(invoice_number=pat("^INV-[0-9]{4,6}$"), issued=f("date"), due=f("date"),
            lines=arr(obj(description=s(50), price=ref("money")), 1, 4), total=ref("money"), notes=ns(80))}),
    ("flight", "Describe a flight as JSON: number, departure and arrival (airport code, time), seats left, status.",
     {"$defs": {"stop": obj(airport=pat("^[A-Z]{3}$"), time=f("date-time"))},
      **obj(flight=pat("^[A-Z]{2}[0-9]{2,4}$"), departure=ref("stop"), arrival=ref("stop"), seats_left=i(0, 400),
            status=en("scheduled", "boarding", "delayed", "landed"))}),
    ("grades", "Give a report card as JSON: student id, name, grades per subject (score, letter), passed or not.",
     obj(student_id=f("uuid"), name=s(40), passed=BOOL,
         grades=arr(obj(subject=s(30), score=i(0, 100), letter=en("A", "B", "C", "D", "F")), 2, 5))),
    ("holidays", "List public holidays in France as JSON: the country and each holiday's name and date.",
     obj(country=s(30), holidays=arr(obj(name=s(40), date=f("date")), 3, 6))),
    ("alarms", "Set some alarms as JSON: each with a label, a time (like 07:00:00Z), and the weekdays it rings.",
     obj(alarms=arr(obj(label=s(30), at=f("time"), days=arr(en("mon", "tue", "wed", "thu", "fri"), hi=5)), 2, 4))),
    ("movie", "Describe a sci-fi movie as JSON: title, year, genres, rating out of 10, the movie it sequels (or null).",
     obj(title=s(60), year=i(1900, 2030), genres=arr(en("sci-fi", "action", "drama", "comedy"), 1, 3),
         rating=num(0, 10), sequel_to=ns(60))),
    ("table_row", "Give a club member as a JSON table row: an array of name, age, then up to two true/false flags.",
     obj(row={"type": "array", "prefixItems": [s(30), i(0, 150)], "items": BOOL, "minItems": 2, "maxItems": 4})),
    ("hosts", "List the computers on a home network as JSON: the subnet, then each host's name and IPv4 address.",
     obj(subnet=s(20), hosts=arr(obj(name=s(20), ip=f("ipv4")), 3, 6))),
    # Prompts that ask for values the formats forbid (but leap second 23:59:60Z): the grammar must not let them out.
    ("bad_dates", "Copy these dates into JSON: 2023-02-30, 2023-04-31, 2023-02-29, 2024-06-31.",
     obj(dates=arr(f("date"), 4, 4))),
    ("bad_ips", "Copy these IPv4 addresses into JSON: 010.001.002.003, 192.168.001.001, 10.0.0.07.",
     obj(addresses=arr(f("ipv4"), 3, 3))),
    ("bad_times", "Copy these times into JSON: 12:30:60Z, 08:15:60+02:00, 23:59:60Z.",
     obj(times=arr(f("time"), 3, 3))),
    # Natural, and refused by design: uniqueItems is not enforced, nor a length beside a pattern.
    ("article_tags", "Tag a news article about the economy as JSON: its title and a few distinct tags.",
     obj(title=s(60), tags={"type": "array", "items": s(20), "uniqueItems": True, "maxItems": 5}), "refused"),
    ("signup", "Sign up a user as JSON: a username of lowercase letters, digits and underscores, and an age.",
     obj(username={"type": "string", "pattern": "^[a-z0-9_]+$", "minLength": 3, "maxLength": 16}, age=i(13, 120)),
     "refused"),
]

WANTED = ["type-union", "properties", "required", "additionalProperties:false", "additionalProperties:schema",
          "enum", "const", "anyOf", "oneOf", "allOf", "items", "prefixItems", "minItems", "maxItems", "minLength",
          "maxLength", "pattern", "format:date", "format:time", "format:date-time", "format:uuid", "format:email",
          "format:ipv4", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "$ref", "recursive",
          "nullable", "nested-object", "array-of-objects"]


def features(schema):
    """The keywords a schema uses, and the shapes it has (walking subschemas, never names or values)."""
    got, defs = set(), schema.get("$defs", {})

    def is_object(x):
        if isinstance(x, dict) and "$ref" in x:
            x = defs.get(x["$ref"].rsplit("/", 1)[-1])
        return isinstance(x, dict) and x.get("type") == "object"

    def walk(x):
        if not isinstance(x, dict):
            return
        got.update(k for k in x if k not in ("type", "format", "additionalProperties", "title", "description"))
        if isinstance(x.get("type"), list):
            got.update(["type-union"] + ["nullable"] * ("null" in x["type"]))
        if "format" in x:
            got.add("format:" + x["format"])
        if "additionalProperties" in x:
            got.add("additionalProperties:" + ("false" if x["additionalProperties"] is False else "schema"))
        if any(NULL in x.get(k, []) for k in ("anyOf", "oneOf")):
            got.add("nullable")
        if any(is_object(p) for p in x.get("properties", {}).values()):
            got.add("nested-object")
        if is_object(x.get("items")):
            got.add("array-of-objects")
        for sub in [*x.get("properties", {}).values(), *x.get("$defs", {}).values(), x.get("items"),
                    x.get("additionalProperties")] + sum((x.get(k, []) for k in ("anyOf", "oneOf", "allOf",
                                                                              "prefixItems")), []):
            walk(sub)
    walk(schema)
    if any(f'"#/$defs/{n}"' in json.dumps(d) for n, d in defs.items()):
        got.add("recursive")
    return got


# ---- running -------------------------------------------------------------------
def request(model, name, prompt, schema, max_tokens, seed=None):
    kw = dict(model=model, max_tokens=max_tokens, messages=[{"role": "user", "content": prompt}],
              response_format={"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}})
    return kw | (dict(temperature=0) if seed is None else dict(temperature=1.0, seed=seed))


def compile_ms(url, model, name, prompt, schema):
    """The first request with a schema less the same one again (cached), in ms, the median over 3 texts
    of it (a $comment apart: each compiled anew); or the 400's message. Through urllib, which sends a
    request in one write: through the openai client (httpx) a small request on loopback waits ~40 ms
    now and then, with or without a schema (likely Nagle's algorithm and delayed ACKs)."""
    def once(kw):
        req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(kw).encode(),
                                     headers={"Content-Type": "application/json"})
        t0 = time.perf_counter()
        urllib.request.urlopen(req, timeout=600).read()
        return time.perf_counter() - t0
    ms = []
    for k in range(3):
        kw = request(model, name, prompt, {"$comment": f"variant {k}"} | schema, 1)
        try:
            ms.append((once(kw) - once(kw)) * 1e3)
        except urllib.error.HTTPError as e:
            return None, json.loads(e.read())["error"]["message"]
    return statistics.median(ms), None


def check(schema, text):
    """None if `text` is JSON that validates, else jsonschema's (or the parser's) error."""
    try:
        value = json.loads(text)
    except ValueError as e:
        return f"not JSON: {e}"
    e = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(schema, format_checker=FORMATS).iter_errors(value))
    return None if e is None else f"at {e.json_path}: {e.message}" + (f" ({e.cause})" if e.cause else "") + \
        "".join(f" [{'/'.join(map(str, c.schema_path))}: {c.message}]" for c in e.context)


async def run_one(client, gate, model, case, seed, max_tokens):
    name, prompt, schema = case[:3]
    r = {"name": name, "run": "greedy" if seed is None else f"seed {seed}", "finish": "error", "text": "",
         "tokens": 0, "error": None}
    async with gate:
        try:
            answer = await client.chat.completions.create(**request(model, name, prompt, schema, max_tokens, seed))
        except openai.APIError as e:
            return r | {"error": str(e)}
    c = answer.choices[0]
    r |= {"finish": c.finish_reason, "text": c.message.content or "", "tokens": answer.usage.completion_tokens}
    return r | {"error": check(schema, r["text"]) if r["finish"] == "stop" else None}


def short(x, n=120):
    x = " ".join(str(x).split()).replace("|", "\\|")  # a table's cell
    return x if len(x) <= n else x[:n - 1] + "…"


def report(args, suite, compiled, refused, wrong_mark, results, wall):
    print(f"# {os.path.basename(args.model)}: {len(suite)} schemas, greedy + seeds {args.seeds} at temperature 1, "
          f"max_tokens {args.max_tokens}, {args.burst} in flight, {args.threads} threads, "
          f"jsonschema {importlib.metadata.version('jsonschema')}, flover_server built "
          f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(os.path.getmtime(SERVER)))}\n")
    print("| schema | features | compile ms | greedy | sampled: valid / finished of all | failures |")
    print("|---|---|---:|---|---:|---|")
    for name, _, schema, *_ in suite:
        feats = ", ".join(sorted(features(schema) - {"properties", "required", "$defs"}))
        if name in refused:
            print(f"| {name} | {feats} | – | refused | – | {short(refused[name], 140)} |")
            continue
        greedy, *sampled = [r for r in results if r["name"] == name]
        done = [r for r in sampled if r["finish"] == "stop"]
        print(f"| {name} | {feats} | {compiled[name]:.0f} | " +
              (greedy["finish"] if greedy["finish"] != "stop" else "INVALID" if greedy["error"] else "ok") +
              f" | {sum(not r['error'] for r in done)} / {len(done)} of {len(sampled)} | " +
              "; ".join(short(f"{r['run']}: {r['error']}") for r in [greedy] + sampled if r["error"]) + " |")
    finished = [r for r in results if r["finish"] == "stop"]
    invalid = [r for r in finished if r["error"]]
    cut = [r for r in results if r["finish"] == "length"]
    other = [r for r in results if r["finish"] not in ("stop", "length")]
    print(f"\n## Summary\n\noutputs {len(results)}: finished {len(finished)}, valid {len(finished) - len(invalid)}, "
          f"invalid {len(invalid)}, cut by length {len(cut)}, errors {len(other)}; schemas refused {len(refused)} "
          f"of {len(suite)} ({sum(len(c) > 3 for c in suite)} marked to be); {wall:.0f} s in all")
    if compiled:
        slowest = max(compiled, key=compiled.get)
        print(f"compile time (first request less the same again, max_tokens=1, median of 3; indicative): "
              f"p50 {statistics.median(compiled.values()):.0f} ms, max {compiled[slowest]:.0f} ms ({slowest})")
    for r in invalid:
        print(f"\nINVALID {r['name']} ({r['run']}): {r['error']}\n  output: {r['text']}")
    for r in cut:
        print(f"\nlength {r['name']} ({r['run']}), {r['tokens']} tokens, ends: …{short(r['text'][-100:])}")
    for r in other:
        print(f"\nerror {r['name']} ({r['run']}): {r['error']}")
    for name, message in refused.items():
        print(f"\nrefused {name}{' (NOT marked to be)' if name in wrong_mark else ''}: {message}")
    for name in set(wrong_mark) - set(refused):
        print(f"\naccepted {name}, though marked to be refused")
    return 1 if invalid or wrong_mark else 0


async def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--seeds", default="1,2,3", help="seeds of the sampled runs (temperature 1)")
    ap.add_argument("--max_tokens", type=int, default=384)
    ap.add_argument("--burst", type=int, default=16, help="requests in flight (and the server's --max_batch)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", help="comma-separated schema names")
    ap.add_argument("--dump", help="write every answer here, one JSON object a line")
    args = ap.parse_args()
    args.seeds = [int(x) for x in args.seeds.split(",") if x]
    suite = [c for c in SUITE if not args.only or c[0] in args.only.split(",")]
    for c in suite:
        jsonschema.Draft202012Validator.check_schema(c[2])
    missing = set(WANTED) - set().union(*(features(c[2]) for c in suite if len(c) == 3))
    if missing and not args.only:
        sys.exit(f"the suite does not cover {sorted(missing)}")
    began = time.perf_counter()
    server = argparse.Namespace(gguf=args.model, threads=args.threads, burst=args.burst, flover_dtype="auto")
    proc, url = start("flover", server, args.max_tokens + 256)  # --max_seq_len: the prompts are < 256 tokens
    try:
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=3600)
        model = (await client.models.list()).data[0].id
        # The first schema compiled also builds the vocabulary's tables: not a schema's cost.
        compile_ms(url, model, "warm_up", "Hi", {"type": "object"})
        compiled, refused = {}, {}
        for name, prompt, schema, *_ in suite:
            ms, message = compile_ms(url, model, name, prompt, schema)
            if message is None:
                compiled[name] = ms
            else:
                refused[name] = message
        wrong_mark = [c[0] for c in suite if (c[0] in refused) != (c[3:] == ("refused",))]
        gate = asyncio.Semaphore(args.burst)
        results = await asyncio.gather(*(run_one(client, gate, model, c, seed, args.max_tokens)
                                         for c in suite if c[0] in compiled for seed in [None] + args.seeds))
    finally:
        stop(proc)
    if args.dump:
        with open(args.dump, "w") as out:
            out.writelines(json.dumps(r) + "\n" for r in results)
    return report(args, suite, compiled, refused, wrong_mark, results, time.perf_counter() - began)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
