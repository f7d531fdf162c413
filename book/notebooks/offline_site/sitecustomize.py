"""The book's offline guard: a Python started with this folder on ``PYTHONPATH`` refuses every
network connection that does not stay on this machine.

``book.notebooks.common.kernel_env`` puts this folder first on the ``PYTHONPATH`` of every
notebook kernel the book starts (``make execute``, the nbval run of ``make test-notebooks``,
``make check``), so that a chapter which tried to download something fails its run instead of
depending on the network. Python imports ``sitecustomize`` at start-up; this one installs an
audit hook (PEP 578, ``sys.addaudithook``: it cannot be removed) on the events
``socket.connect``, ``socket.sendto``, ``socket.sendmsg`` and ``socket.getaddrinfo``. Loopback
addresses (``127.0.0.0/8``, ``::1``, ``localhost``), the unspecified address and Unix sockets
are allowed: the kernel itself talks to Jupyter over loopback. Anything else raises
:class:`NetworkRefused` (a ``ConnectionRefusedError``, so code that handles a missing network
sees the usual exception) before any packet leaves.

Self-contained on purpose (standard library only, nothing from ``book``): it runs before
anything else in the interpreter.
"""

from __future__ import annotations

import ipaddress
import socket
import sys

LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback", ""}
MESSAGE = "refused by the book's offline guard (only loopback is allowed): {event} {target!r}"


class NetworkRefused(ConnectionRefusedError):
    """A connection to a non-loopback address, refused by the offline guard."""


def _own_names() -> set[str]:
    try:
        return {socket.gethostname()}
    except OSError:  # pragma: no cover - no hostname at all
        return set()


def is_local(host: object) -> bool:
    """True for a host that never leaves this machine: loopback or unspecified IP literals,
    ``localhost`` (and this machine's own host name, which resolves from /etc/hosts)."""
    if host is None:
        return True
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if not isinstance(host, str):
        return False
    name = host.strip().rstrip(".").lower()
    if name in LOCAL_NAMES or name in _own_names():
        return True
    try:
        address = ipaddress.ip_address(name.split("%")[0])  # drop an IPv6 scope id
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback or address.is_unspecified


def _target_is_local(address: object) -> bool:
    if isinstance(address, (str, bytes)):  # AF_UNIX path (or abstract socket): local
        return True
    if isinstance(address, tuple) and address:
        return is_local(address[0])
    return False


def _hook(event: str, args: tuple) -> None:
    if event in ("socket.connect", "socket.sendto", "socket.sendmsg"):
        address = args[1] if len(args) > 1 else None
        if address is not None and not _target_is_local(address):
            raise NetworkRefused(MESSAGE.format(event=event, target=address))
    elif event == "socket.getaddrinfo":
        if not is_local(args[0]):
            raise NetworkRefused(MESSAGE.format(event=event, target=args[0]))


if not getattr(sys, "_book_offline_guard", False):
    sys.addaudithook(_hook)
    sys._book_offline_guard = True
