"""A real RTMP server for tests and benches: Debian's nginx with libnginx-mod-rtmp, on loopback.

It runs as one process (no master, no daemon) with its own configuration and
logs in a directory of its own, so it can be killed by pid and started again
on the same port, the way a broadcast server goes away under a live stream.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from pathlib import Path

from pyrofling.bench.server_process import ServerProcess

MODULE_PATHS = (
    Path("/usr/lib/nginx/modules/ngx_rtmp_module.so"),
    Path("/usr/lib64/nginx/modules/ngx_rtmp_module.so"),
)
INSTALL_HINT = "install nginx and its RTMP module: apt-get install nginx libnginx-mod-rtmp (scripts/setup does)"


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if Path(p).exists()), None)


def rtmp_module() -> Path | None:
    return next((p for p in MODULE_PATHS if p.exists()), None)


def missing() -> str | None:
    """Why an RTMP server cannot be started here, or None."""
    if nginx_binary() is None:
        return f"nginx is not installed; {INSTALL_HINT}"
    if rtmp_module() is None:
        return f"nginx's RTMP module is not installed; {INSTALL_HINT}"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class NginxRtmp(ServerProcess):
    """``with NginxRtmp(workdir) as server: server.url("name")``; ``kill()`` and ``start()`` mid-stream."""

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        reason = missing()
        if reason is not None:
            raise RuntimeError(reason)
        self.workdir = workdir
        self.port = port or _free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        workdir.mkdir(parents=True, exist_ok=True)
        self.config = workdir / "nginx.conf"
        self.error_log = self.log = workdir / "error.log"
        self.config.write_text(
            "daemon off;\n"
            "master_process off;\n"
            f"pid {workdir / 'nginx.pid'};\n"
            f"error_log {self.error_log} info;\n"
            f"load_module {rtmp_module()};\n"
            "events { worker_connections 256; }\n"
            "rtmp {\n"
            "  server {\n"
            f"    listen 127.0.0.1:{self.port};\n"
            "    chunk_size 4096;\n"
            "    application live { live on; record off; }\n"
            "  }\n"
            "}\n"
        )

    def url(self, name: str) -> str:
        return f"rtmp://127.0.0.1:{self.port}/live/{name}"

    def start(self, timeout_s: float = 10.0) -> None:
        binary = nginx_binary()
        assert binary is not None
        cmd = [binary, "-p", str(self.workdir), "-c", str(self.config), "-e", str(self.error_log)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nginx exited at start: {self.log_tail()}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"nginx did not listen on port {self.port} within {timeout_s:g} s: {self.log_tail()}")
