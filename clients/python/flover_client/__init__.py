"""Python client for the Flover gRPC API.

    from flover_client import FloverClient
    client = FloverClient("127.0.0.1:50051")
    for piece in client.generate(token_ids=[464, 2068], max_new_tokens=8, temperature=0):
        print(piece.token_ids, piece.text)
    # A conversation, through the model's chat template:
    for piece in client.generate(messages=[{"role": "user", "content": "Hi!"}], temperature=0):
        print(piece.text, end="")

Several replicas: FloverClient(["10.0.0.1:50051", "10.0.0.2:50051"]) spreads
calls over them with gRPC's round_robin policy (IPv4 HOST:PORT each).

`generate` yields GenerateResponse messages; the last one has finish_reason
and usage. Errors raise grpc.RpcError with the server's status code and a
message naming the bad field. The raw stubs are flover_pb2 / flover_pb2_grpc.
"""
import json

import grpc

from . import flover_pb2, flover_pb2_grpc

__all__ = ["FloverClient", "flover_pb2", "flover_pb2_grpc"]


class FloverClient:
    def __init__(self, target="127.0.0.1:50051", channel=None, api_key=None, tls_ca=None,
                 tls_cert=None, tls_key=None):
        """`target`: HOST:PORT, or a list of them (round_robin over replicas).
        `api_key` is sent as `authorization: Bearer KEY` with every call.
        `tls_ca` (a PEM file) connects with TLS; `tls_cert`/`tls_key` add a
        client certificate for servers that require one."""
        self.metadata = (("authorization", f"Bearer {api_key}"),) if api_key else None
        if channel is None:
            options = []
            if not isinstance(target, str):
                target = "ipv4:" + ",".join(target)
                options.append(("grpc.lb_policy_name", "round_robin"))
            if tls_ca is None:
                channel = grpc.insecure_channel(target, options=options)
            else:
                def read(path):
                    if path is None:
                        return None
                    with open(path, "rb") as f:
                        return f.read()
                creds = grpc.ssl_channel_credentials(read(tls_ca), read(tls_key), read(tls_cert))
                channel = grpc.secure_channel(target, creds, options=options)
        self.channel = channel
        self.stub = flover_pb2_grpc.FloverStub(self.channel)

    def generate(self, prompt=None, token_ids=None, messages=None, max_new_tokens=16,
                 temperature=1.0, top_k=0, top_p=1.0, repetition_penalty=1.0, seed=None, stop=(),
                 stop_token_ids=(), ignore_eos=False, return_logprobs=False, top_logprobs=0,
                 request_id="", timeout=None, presence_penalty=0.0, frequency_penalty=0.0,
                 logit_bias=None, min_p=0.0, choice=None, json_schema=None, regex=None,
                 grammar=None, tools=None, tool_choice=None, parallel_tool_calls=None,
                 speculative=None, chat_template_kwargs=None):
        """One of `prompt` (text), `token_ids`, or `messages`: a list of
        {"role": "system" | "user" | "assistant" | "tool", "content": str},
        as OpenAI's (an assistant's "tool_calls", a tool's "tool_call_id");
        for a vision model a message's content may be a list of parts,
        {"type": "text", "text": str} and {"type": "image", "image": bytes}
        (PNG or JPEG),
        rendered with the model's chat template (the reply ends at its end of
        turn). `logit_bias`: {token_id: bias}; at most one constraint:
        `choice` (a list of strings the output must be exactly one of),
        `json_schema` (a dict or JSON text), `regex`, `grammar` (EBNF).
        `tools`: OpenAI's [{"type": "function", "function": {"name",
        "description", "parameters"}}]; `tool_choice`: "none", "auto",
        "required" or a function's name; the last response then carries
        `tool_calls`. `speculative=False`: no speculative drafts for this
        request on a server started with --speculative (the output is the
        same either way). `chat_template_kwargs`: a dict of the chat
        template's variables ({"enable_thinking": False}); with the server's
        reasoning parser, each response's `reasoning` holds the reasoning
        apart from `text`."""
        req = flover_pb2.GenerateRequest(request_id=request_id, return_logprobs=return_logprobs,
                                         top_logprobs=top_logprobs)
        if token_ids is not None:
            req.token_ids.ids.extend(token_ids)
        elif messages is not None:
            for m in messages:
                content = m.get("content") or ""
                msg = req.messages.messages.add(role=m["role"], content=content if isinstance(content, str) else "",
                                                tool_call_id=m.get("tool_call_id", ""),
                                                name=m.get("name", ""))
                if not isinstance(content, str):
                    for part in content:
                        if part["type"] == "image":
                            msg.parts.add(image=part["image"])
                        else:
                            msg.parts.add(text=part["text"])
                for call in m.get("tool_calls") or ():
                    f = call["function"]
                    args = f.get("arguments", "{}")
                    msg.tool_calls.add(id=call.get("id", ""), name=f["name"],
                                       arguments=args if isinstance(args, str) else json.dumps(args))
        elif prompt is not None:
            req.text = prompt
        if chat_template_kwargs is not None:
            req.chat_template_kwargs = json.dumps(chat_template_kwargs)
        req.sampling.temperature = temperature
        req.sampling.top_k = top_k
        req.sampling.top_p = top_p
        req.sampling.repetition_penalty = repetition_penalty
        req.sampling.presence_penalty = presence_penalty
        req.sampling.frequency_penalty = frequency_penalty
        req.sampling.min_p = min_p
        for token, bias in (logit_bias or {}).items():
            req.sampling.logit_bias[token] = bias
        if choice is not None:
            req.constraint.choice.SetInParent()  # set even when the list is empty
            req.constraint.choice.choices.extend(choice)
        if json_schema is not None:
            req.constraint.json_schema = json_schema if isinstance(json_schema, str) else json.dumps(json_schema)
        if regex is not None:
            req.constraint.regex = regex
        if grammar is not None:
            req.constraint.grammar = grammar
        for t in tools or ():
            f = t.get("function", t)
            params = f.get("parameters")
            req.tools.add(name=f["name"], description=f.get("description", ""),
                          parameters="" if params is None else
                          params if isinstance(params, str) else json.dumps(params))
        if tool_choice is not None:
            modes = {"none": flover_pb2.ToolChoice.NONE, "auto": flover_pb2.ToolChoice.AUTO,
                     "required": flover_pb2.ToolChoice.REQUIRED}
            if tool_choice in modes:
                req.tool_choice.mode = modes[tool_choice]
            else:
                req.tool_choice.mode = flover_pb2.ToolChoice.FUNCTION
                req.tool_choice.function = tool_choice
        if parallel_tool_calls is not None:
            req.parallel_tool_calls = parallel_tool_calls
        if speculative is not None:
            req.speculative = speculative
        if seed is not None:
            req.sampling.seed = seed
        req.stopping.max_new_tokens = max_new_tokens
        req.stopping.stop_strings.extend(stop)
        req.stopping.stop_token_ids.extend(stop_token_ids)
        req.stopping.ignore_eos = ignore_eos
        return self.stub.Generate(req, timeout=timeout, metadata=self.metadata)

    def model_info(self, timeout=10):
        return self.stub.GetModelInfo(flover_pb2.GetModelInfoRequest(), timeout=timeout,
                                      metadata=self.metadata)

    def stats(self, timeout=10):
        return self.stub.GetStats(flover_pb2.GetStatsRequest(), timeout=timeout,
                                  metadata=self.metadata)

    def embed(self, texts=None, token_ids=None, dimensions=0, timeout=60):
        """Embeddings of `texts` (or lists of `token_ids`), in order, as lists
        of floats: the server must run with --embeddings."""
        req = flover_pb2.EmbedRequest(texts=texts or [], dimensions=dimensions)
        for ids in token_ids or []:
            req.token_ids.add().ids.extend(ids)
        reply = self.stub.Embed(req, timeout=timeout, metadata=self.metadata)
        return [list(e.values) for e in reply.embeddings]
