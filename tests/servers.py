"""Real servers for the tests: gunicorn with the shipped gunicorn.conf.py, on 127.0.0.1."""

from __future__ import annotations

import http.client
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "test-token-1"


# Not the `random` module's own generator: pytest-randomly seeds it alike at each test in every
# xdist worker, so each worker would try the same ports in the same order.
_CHOOSER = random.SystemRandom()
#: The ports `free_port` has handed out in this process: none is handed out twice.
_HANDED: set[int] = set()


def first_ephemeral_port() -> int:
    """The lowest port the kernel hands out to a socket bound to port 0 (an outgoing connection's)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A loopback port no one holds, from below the kernel's ephemeral range when there is room.

    A port the kernel picked (bind to 0) goes back to its pool once closed: a client's outgoing
    connection can take it before the server this port is for binds it, and a Redis Cluster's bus
    port then fails with "Address already in use". Ports below that range are only ever bound on
    purpose, so a server's port stays free until it starts.

    Nor is a port handed out twice in a process: one still free may be the one just handed out
    for a server that has not bound it yet (a cluster node's bus port, then its own; nginx's
    two listeners), and of a few hundred random picks two would often be the same.
    """
    first_ephemeral = first_ephemeral_port()
    if first_ephemeral > 11_000:
        for _ in range(100):
            port = _CHOOSER.randrange(10_000, first_ephemeral)
            if port in _HANDED:
                continue
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
                _HANDED.add(port)
                return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_serving(port: int, process: subprocess.Popen, deadline_s: float = 40.0) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited early with {process.returncode}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing served on port {port} within {deadline_s}s")


class Gunicorn:
    """`gunicorn` started from the project root, as deployed, with its output in a file."""

    def __init__(
        self, env: dict[str, str] | None = None, args: tuple[str, ...] = (), preexec_fn: Any = None
    ) -> None:
        """`preexec_fn`: run in the child before gunicorn starts (an open-file limit, say)."""
        self.env = dict(env or {})
        self.port = free_port()
        full_env = {
            **os.environ,
            "PLANTS_API_TOKENS": TOKEN,
            "GUNICORN_BIND": f"127.0.0.1:{self.port}",
            **(env or {}),
        }
        self._serve([sys.executable, "-m", "gunicorn", *args], full_env, ROOT, preexec_fn)

    def _serve(
        self,
        command: list[str],
        env: dict[str, str] | None,
        cwd: Path,
        preexec_fn: Any = None,
        log_dir: Path | None = None,
    ) -> None:
        """Start `command` with its output in a file (in `log_dir`, by default the system's
        temporary directory), and wait until it serves /healthz on self.port."""
        self.log = tempfile.NamedTemporaryFile(prefix="gunicorn-", suffix=".log", delete=False, dir=log_dir)  # noqa: SIM115
        self._last_output: str | None = None  # kept by `stop`, which removes the file
        self.process = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=self.log, stderr=subprocess.STDOUT, preexec_fn=preexec_fn
        )
        try:
            wait_until_serving(self.port, self.process)
        except Exception as exc:
            self.stop()
            raise RuntimeError(f"{exc}; gunicorn said:\n{self.output()[-3000:]}") from exc

    def connection(self, timeout: float = 10) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def output(self) -> str:
        if self._last_output is not None:
            return self._last_output
        return Path(self.log.name).read_text(errors="replace")

    def stop(self, timeout: float = 40) -> int:
        """Stop the server; its output stays readable, its file (outside any test's tmp_path) goes."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        if self._last_output is None:
            self._last_output = self.output()
            Path(self.log.name).unlink(missing_ok=True)
        return self.process.returncode


class Served(Gunicorn):
    """A deployment's own command (a Containerfile's CMD, say) serving on `port`, its output in a file."""

    def __init__(
        self, command: list[str], env: dict[str, str], cwd: Path, port: int, log_dir: Path | None = None
    ) -> None:
        self.env = env
        self.port = port
        self._serve(command, env, cwd, log_dir=log_dir)


class SocketActivated(Gunicorn):
    """A command under systemd's socket activation (`systemd-socket-activate`): the listening
    socket is systemd's, the command inherits it (LISTEN_FDS) on the first connection, exec'd in
    place (one pid: SIGHUP and SIGTERM reach gunicorn's master), and gets only the environment
    named in `env`, as a unit's Environment= gives it."""

    def __init__(self, command: list[str], env: dict[str, str], cwd: Path) -> None:
        self.env = env
        self.port = free_port()
        setenv = [f"--setenv={name}={value}" for name, value in env.items()]
        listen = f"--listen=127.0.0.1:{self.port}"
        self._serve(["systemd-socket-activate", listen, *setenv, *command], None, cwd)

    def connection(self, timeout: float = 30) -> http.client.HTTPConnection:
        return super().connection(timeout)


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


class Nginx:
    """nginx running the README's sample deploy/nginx-plants.conf in front of `upstream_port`.

    Only the two addresses, the server's name (the listener's address, which the tests' clients
    name) and the access log's path are replaced (and a TLS listener added where the sample says
    "add TLS here"); everything else is the file as shipped.
    """

    SAMPLE = ROOT / "deploy" / "nginx-plants.conf"

    def __init__(
        self, upstream_port: int, directory: Path, server_name: str = "server_name 127.0.0.1;"
    ) -> None:
        """`server_name`: the site's line in place of the sample's (empty: none, nginx's default)."""
        self.port, self.tls_port = free_port(), free_port()
        self.directory = directory
        cert, key = self_signed_certificate(directory)
        sample = self.SAMPLE.read_text()
        upstream, listener = "server 127.0.0.1:8000;", "listen 127.0.0.1:8080;"
        access_log = "access_log /var/log/nginx/access.log "
        name = "server_name plants.example.com;"
        for replaced in (upstream, listener, access_log, name):
            assert sample.count(replaced) == 1, replaced
        site = (
            sample.replace(upstream, f"server 127.0.0.1:{upstream_port};")
            .replace(
                listener,
                f"listen 127.0.0.1:{self.port}; listen 127.0.0.1:{self.tls_port} ssl;"
                f" ssl_certificate {cert}; ssl_certificate_key {key};",
            )
            .replace(access_log, f"access_log {directory}/access.log ")
            .replace(name, server_name)
        )
        (directory / "plants.conf").write_text(site)
        temp_paths = "\n".join(
            f"    {kind}_temp_path {directory}/{kind};"
            for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        (directory / "nginx.conf").write_text(
            ("user root;\n" if os.geteuid() == 0 else "")
            + f"worker_processes 1;\npid {directory}/nginx.pid;\nerror_log {directory}/error.log warn;\n"
            "daemon off;\nevents { worker_connections 512; }\n"
            f"http {{\n    access_log {directory}/access.log;\n{temp_paths}\n"
            f"    include {directory}/plants.conf;\n}}\n"
        )
        self.process = subprocess.Popen(
            [
                "nginx",
                "-p",
                str(directory),
                "-e",
                str(directory / "error.log"),
                "-c",
                str(directory / "nginx.conf"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((directory / "error.log").read_text()) from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGQUIT)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class RedisServer:
    """Debian's redis-server on 127.0.0.1 and a unix socket in `directory`, started and stopped here.

    It can be stopped, hung (SIGSTOP), killed (SIGKILL) and started again on the same port,
    socket and data directory, for the fault tests.
    """

    def __init__(self, directory: Path, *config: str, config_file: Path | None = None) -> None:
        self.directory = directory
        self.config_file = config_file
        self.port = free_port()
        self.socket = directory / "redis.sock"
        self.config = config
        self.process: subprocess.Popen | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def unix_url(self) -> str:
        return f"unix://{self.socket}"

    def start(self) -> None:
        file = [str(self.config_file)] if self.config_file else []
        self.process = subprocess.Popen(
            ["redis-server", *file, "--bind", "127.0.0.1", "--port", str(self.port),
             "--unixsocket", str(self.socket), "--unixsocketperm", "700",
             "--dir", str(self.directory), "--save", "", "--protected-mode", "yes",
             "--logfile", str(self.directory / "redis.log"), *self.config],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 15
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(64).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((self.directory / "redis.log").read_text(errors="replace"))
            time.sleep(0.05)

    def command(self, *args: str) -> str:
        """One command through redis-cli; its reply as text."""
        return subprocess.run(
            ["redis-cli", "-p", str(self.port), *args], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()

    def signal(self, sig: int) -> None:
        assert self.process is not None
        self.process.send_signal(sig)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)  # a hung server must wake up to exit
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def cluster_node() -> tuple[str, ...]:
    """A Redis Cluster node's options: its nodes.conf in its own directory, and its bus port
    given (by default it is the port + 10000, past 65535 for some)."""
    bus = str(free_port())
    return ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-port", bus)


class RedisClusterServers:
    """A Redis Cluster of Debian's redis-server on 127.0.0.1: 3 primaries, each with a replica
    (or any `nodes` and `replicas` per primary, as redis-cli takes them).

    Made as an operator would: six servers with `cluster-enabled`, joined by
    `redis-cli --cluster create ... --cluster-replicas 1`. A short `cluster-node-timeout` lets a
    test see a failover within a few seconds; each node keeps its nodes.conf in its own
    directory, so a killed node started again rejoins the cluster as itself.
    """

    NODE_TIMEOUT_MS = 1000

    def __init__(self, directory: Path, nodes: int = 6, replicas: int = 1) -> None:
        self.nodes: list[RedisServer] = []
        self.primary_count = nodes // (replicas + 1)
        try:
            for n in range(nodes):
                node_dir = directory / f"node{n}"
                node_dir.mkdir()
                timeout = ("--cluster-node-timeout", str(self.NODE_TIMEOUT_MS))
                self.nodes.append(RedisServer(node_dir, *cluster_node(), *timeout))
            subprocess.run(
                ["redis-cli", "--cluster", "create", *(f"127.0.0.1:{node.port}" for node in self.nodes),
                 "--cluster-replicas", str(replicas), "--cluster-yes"],
                check=True, capture_output=True, timeout=60,
            )  # fmt: skip
            self.wait_until_healthy()
        except Exception:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)

    def node_table(self, via: RedisServer | None = None) -> list[dict[str, str]]:
        """CLUSTER NODES as seen by `via` (the first live node by default)."""
        via = via or next(node for node in self.nodes if node.process and node.process.poll() is None)
        rows = []
        for line in via.command("CLUSTER", "NODES").splitlines():
            fields = line.split()
            rows.append({"id": fields[0], "port": fields[1].split(":")[1].split("@")[0], "flags": fields[2],
                         "primary": fields[3], "slots": " ".join(fields[8:])})  # fmt: skip
        return rows

    def primaries(self) -> list[RedisServer]:
        ports = {
            row["port"]
            for row in self.node_table()
            if "master" in row["flags"] and "fail" not in row["flags"]
        }
        return [node for node in self.nodes if str(node.port) in ports]

    def node_id(self, node: RedisServer) -> str:
        return node.command("CLUSTER", "MYID")

    def replica_of(self, primary: RedisServer) -> RedisServer:
        primary_id = self.node_id(primary)
        port = next(row["port"] for row in self.node_table() if row["primary"] == primary_id)
        return next(node for node in self.nodes if str(node.port) == port)

    def wait_until_healthy(self, timeout: float = 30) -> None:
        """Until every live node says cluster_state:ok, its primaries serve the slots, and every
        replica has finished its sync (WAIT counts only those)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                live = [node for node in self.nodes if node.process and node.process.poll() is None]
                states = {node.command("CLUSTER", "INFO").split("\n")[0].strip() for node in live}
                table = self.node_table()
                primaries = [row for row in table if "master" in row["flags"] and row["slots"]]
                replicas = [row for row in table if "slave" in row["flags"] and "fail" not in row["flags"]]
                synced = all(
                    "master_link_status:up" in node.command("INFO", "replication")
                    for node in live
                    if str(node.port) in {row["port"] for row in replicas}
                )
                if (
                    states == {"cluster_state:ok"}
                    and len(primaries) == self.primary_count
                    and len(replicas) == len(live) - self.primary_count
                    and synced
                ):
                    return
            except subprocess.SubprocessError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster did not become healthy")
            time.sleep(0.1)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
