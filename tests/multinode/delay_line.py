#!/usr/bin/env python3
"""A link with a fixed one-way delay, in user space: netem's `delay` for
kernels without sch_netem.

    delay_line.py --delay_ms=5 TAP_A TAP_B

Creates two TAP devices in the current network namespace and forwards every
Ethernet frame that the kernel sends out of one into the other, each
`delay_ms` after it was read, in order. Bridge each TAP with one side of the
link to be delayed and the frames between those sides cross with the delay
in each direction (as `tc qdisc add ... netem delay 5ms` on both ends'
egress would give: a round trip of twice the delay). No loss, no reordering,
no rate limit. Prints "ready" once both devices exist; runs until killed.
"""
import argparse
import collections
import errno
import fcntl
import os
import select
import struct
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000


def open_tap(name):
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TAP | IFF_NO_PI))
    return fd


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay_ms", type=float, required=True)
    parser.add_argument("tap_a")
    parser.add_argument("tap_b")
    args = parser.parse_args()
    if args.delay_ms < 0:
        sys.exit("delay_line: --delay_ms must be >= 0")
    delay = args.delay_ms / 1000.0
    a, b = open_tap(args.tap_a), open_tap(args.tap_b)
    peer = {a: b, b: a}
    # One FIFO per direction: a constant delay keeps each direction's order.
    queues = {a: collections.deque(), b: collections.deque()}  # by destination
    print("ready", flush=True)
    while True:
        due = [q[0][0] for q in queues.values() if q]
        timeout = max(0.0, min(due) - time.monotonic()) if due else None
        readable, _, _ = select.select([a, b], [], [], timeout)
        now = time.monotonic()
        for fd in readable:
            while True:  # everything waiting, so no frame waits a turn
                try:
                    frame = os.read(fd, 65536)
                except BlockingIOError:
                    break
                except OSError as e:
                    if e.errno in (errno.EAGAIN, errno.EIO):
                        break
                    raise
                queues[peer[fd]].append((now + delay, frame))
        now = time.monotonic()
        for dst, q in queues.items():
            while q and q[0][0] <= now:
                _, frame = q.popleft()
                try:
                    os.write(dst, frame)
                except OSError:
                    pass  # the far side is down: the frame is lost, as on a wire


if __name__ == "__main__":
    main()
