"""No notebook touches the network: every kernel the book starts runs under the offline guard.

How the whole book is covered without running every notebook twice: the guard is a
``sitecustomize.py`` (``book/notebooks/offline_site/``) that ``book.notebooks.common.kernel_env``
puts first on the kernel's ``PYTHONPATH``. ``kernel_env`` is the one environment of every
kernel the book starts: ``make execute`` (``book.notebooks.common.execute``), ``make check`` and
the nbval run of ``make test-notebooks`` (the repository's ``conftest.py`` copies it into the
environment nbval starts its kernels with). So the nbval run, which executes every chapter,
solution and exercise notebook anyway, is the full offline run: a notebook that connects
anywhere but loopback fails there. This file tests the pieces of that argument:

- the guard refuses non-loopback connections (IPv4, IPv6, a name to resolve, UDP) before any
  packet leaves, and allows loopback, ``localhost`` and Unix sockets;
- ``kernel_env`` puts the guard first, and the nbval plugin uses ``kernel_env``;
- (slow) a real kernel started by ``execute`` refuses a non-loopback connection while its own
  loopback traffic to Jupyter works (the notebook runs), and the same under nbval.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import nbformat
import pytest

from book.notebooks.common import OFFLINE_SITE, REPO, execute, kernel_env

# Addresses reserved for documentation (RFC 5737, RFC 3849): never routed, so even a broken
# guard could not reach anyone; the guard must refuse them at once, without a timeout.
OUTSIDE = [("192.0.2.1", 80), ("198.51.100.7", 443), ("2001:db8::1", 80), ("10.0.0.1", 22)]

PROBE = textwrap.dedent(
    """
    import socket, sys
    results = {}
    for host, port in %r:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        s = socket.socket(family, socket.SOCK_STREAM)
        s.settimeout(3)
        try:
            s.connect((host, port))
            results[host] = "connected"
        except ConnectionRefusedError as err:
            results[host] = "guard" if "offline guard" in str(err) else "refused: " + str(err)
        except OSError as err:
            results[host] = "oserror: " + str(err)
        finally:
            s.close()
    for label, call in (
        ("resolve", lambda: socket.getaddrinfo("example.com", 80)),
        ("create_connection", lambda: socket.create_connection(("example.org", 80), timeout=3)),
        ("udp", lambda: socket.socket(type=socket.SOCK_DGRAM).sendto(b"x", ("192.0.2.9", 53))),
    ):
        try:
            call()
            results[label] = "connected"
        except ConnectionRefusedError as err:
            results[label] = "guard" if "offline guard" in str(err) else str(err)
        except OSError as err:
            results[label] = "oserror: " + str(err)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    socket.create_connection(("127.0.0.1", port), timeout=3).close()
    socket.create_connection(("localhost", port), timeout=3).close()
    results["loopback"] = "connected"
    if hasattr(socket, "AF_UNIX"):
        a, b = socket.socketpair()
        a.sendall(b"ok")
        results["unix"] = b.recv(2).decode()
    print(sorted(results.items()))
    """
) % (OUTSIDE,)

EXPECTED = sorted(
    [(host, "guard") for host, _ in OUTSIDE]
    + [("resolve", "guard"), ("create_connection", "guard"), ("udp", "guard")]
    + [("loopback", "connected"), ("unix", "ok")]
)


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )


def test_the_guard_refuses_every_non_loopback_connection_and_allows_loopback():
    run = _python(PROBE, kernel_env())
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == str(EXPECTED), run.stdout + run.stderr


def test_without_the_guard_the_same_probe_is_not_refused_by_it():
    """The companion: the probe can tell a guarded interpreter from an unguarded one (the
    documentation addresses then fail, if at all, with the network's own error)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO)
    code = PROBE.replace("s.settimeout(3)", "s.settimeout(0.2)").replace("timeout=3", "timeout=0.2")
    run = _python(code, env)
    assert run.returncode == 0, run.stderr
    assert "'guard'" not in run.stdout, run.stdout


def test_the_guard_cannot_be_switched_off_by_the_notebook():
    code = "import sys, socket\nsys.audit_hooks = None\n" + textwrap.dedent(
        """
        try:
            socket.create_connection(("192.0.2.1", 80), timeout=3)
        except ConnectionRefusedError as err:
            print("offline guard" in str(err))
        """
    )
    run = _python(code, kernel_env())
    assert run.stdout.strip() == "True", run.stdout + run.stderr


def test_is_local_classifies_addresses():
    sys.path.insert(0, OFFLINE_SITE)
    try:
        import sitecustomize as guard  # the book's guard (no other sitecustomize is installed)
    finally:
        sys.path.remove(OFFLINE_SITE)
    if not hasattr(guard, "is_local"):
        pytest.skip(f"another sitecustomize was imported first: {guard.__file__}")
    for host in ("127.0.0.1", "127.8.9.10", "::1", "localhost", "LOCALHOST.", "0.0.0.0", None,
                 "::ffff:127.0.0.1", b"127.0.0.1"):  # fmt: skip
        assert guard.is_local(host), host
    for host in ("192.0.2.1", "8.8.8.8", "2001:db8::1", "example.com", "::ffff:8.8.8.8", 1234):
        assert not guard.is_local(host), host


def test_every_book_kernel_gets_the_guard_first_on_its_path():
    env = kernel_env({"PYTHONPATH": "/elsewhere"})
    assert env["PYTHONPATH"].split(os.pathsep) == [OFFLINE_SITE, "/elsewhere"]
    once = kernel_env({"PYTHONPATH": os.pathsep.join([OFFLINE_SITE, "/x"])})["PYTHONPATH"]
    assert once.split(os.pathsep).count(OFFLINE_SITE) == 1
    assert os.path.isfile(os.path.join(OFFLINE_SITE, "sitecustomize.py"))
    # the nbval plugin starts its kernels with kernel_env (so make test-notebooks is guarded)
    conftest = (REPO / "conftest.py").read_text()
    assert "kernel_env()" in conftest and "os.environ.update(env)" in conftest


NOTEBOOK_CELLS = [
    "import socket\nsocket.create_connection(('127.0.0.1', 1), timeout=1) if False else None",
    textwrap.dedent(
        """
        import socket
        try:
            socket.create_connection(("192.0.2.1", 80), timeout=3)
            outcome = "connected"
        except ConnectionRefusedError as err:
            outcome = "guard" if "offline guard" in str(err) else "refused"
        print(outcome)
        """
    ),
]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_notebook_kernel_refuses_the_network(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in NOTEBOOK_CELLS])
    execute(nb, tmp_path, timeout=60)  # the kernel's own loopback traffic works: it ran
    assert nb.cells[1].outputs[0]["text"].strip() == "guard"


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_notebook_that_connects_fails_under_nbval(tmp_path):
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("import socket\nsocket.getaddrinfo('example.com', 80)")]
    )
    nbformat.write(nb, tmp_path / "net.ipynb")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    cmd = [sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-q",
           "--rootdir", str(tmp_path), "-c", str(tmp_path / "pytest.ini"), "--nbval-lax",
           "--nbval-current-env", "net.ipynb"]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    run = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=170)
    out = run.stdout + run.stderr
    assert run.returncode == 1 and "offline guard" in out, out
