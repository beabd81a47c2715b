"""agent-gateway task bootstrap (python).

Runs inside the sandbox (bubblewrap locally, the runner image on Kubernetes):

    python3 -I bootstrap.py /agw/run.json

1. optionally starts a TCP -> unix-socket forwarder so HTTP(S)_PROXY=http://127.0.0.1:<port>
   reaches the service's egress proxy (local mode: the sandbox has no network of its own);
2. installs the declared dependencies into the run's tmp dir (pip install --target), its
   output first;
3. prints the sentinel line, then defines the helper globals generate_text, call,
   store_artifact and request_continuation (thin HTTP clients of AGW_HELPER_URL), and runs
   the user's entrypoint as __main__.

run.json: {"entrypoint": "/work/script/main.py", "dependencies": [...], "installDir": "/tmp/.agw",
"pipIndexUrl": null, "proxySocket": null, "proxyPort": 3128, "statusFd": null}.
statusFd, when set, receives JSON lines (hello, install_start, install_done, program_start) for
the service and is closed before user code runs.
"""

import base64
import builtins
import json
import os
import platform
import runpy
import socket
import subprocess
import sys
import threading

SENTINEL = "=== agent-gateway: program output follows ==="


class Status:
    """One-way event channel to the service (an inherited fd), closed before user code runs."""

    def __init__(self, fd):
        self.fd = fd

    def send(self, event, **fields):
        if self.fd is None:
            return
        try:
            os.write(self.fd, (json.dumps({"event": event, **fields}) + "\n").encode())
        except OSError:
            self.fd = None

    def close(self):
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None


# --- egress: TCP 127.0.0.1:<port> -> unix socket of the service's egress proxy ---------------

def _pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def start_forwarder(unix_path, port):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(128)

    def serve():
        while True:
            client, _ = server.accept()
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(unix_path)
            except OSError:
                client.close()
                upstream.close()
                continue
            threading.Thread(target=_pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()

    threading.Thread(target=serve, name="agw-egress-forwarder", daemon=True).start()


# --- dependencies ---------------------------------------------------------------------------

def install(cfg, deps):
    target = os.path.join(cfg.get("installDir") or "/tmp/.agw", "python")
    cmd = [sys.executable, "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
           "--no-warn-script-location", "--progress-bar", "off", "--target", target]
    index = cfg.get("pipIndexUrl")
    if index:
        import urllib.parse

        cmd += ["--index-url", index]
        parsed = urllib.parse.urlsplit(index)
        if parsed.scheme == "http" and parsed.hostname:
            cmd += ["--trusted-host", parsed.hostname]  # the operator chose a plain-http mirror
    cmd += ["--", *deps]
    env = dict(os.environ, PIP_CONFIG_FILE=os.devnull, PYTHONUNBUFFERED="1")
    sys.stdout.flush()
    sys.stderr.flush()
    ok = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL).returncode == 0
    sys.path.insert(0, target)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (target, os.environ.get("PYTHONPATH")) if p)
    os.environ["PATH"] = os.path.join(target, "bin") + os.pathsep + os.environ.get("PATH", "")
    return ok


# --- helper globals -------------------------------------------------------------------------

# Read now, so a script that edits os.environ later cannot break the helpers' proxy settings;
# urllib itself is imported on the first call (it pulls in ssl: ~10 ms per run otherwise).
_proxies = {k: os.environ[v] for k, v in (("http", "http_proxy"), ("https", "https_proxy")) if os.environ.get(v)}
_base = os.environ.get("AGW_HELPER_URL")
_token = os.environ.get("AGW_RUN_TOKEN")


def _helper(name, payload):
    import urllib.error
    import urllib.request

    base, token = _base, _token
    if not base or not token:
        raise RuntimeError(
            f"{name}() is not available in this run: no helper endpoint "
            "(AGW_HELPER_URL / AGW_RUN_TOKEN are not set)")
    body = json.dumps({k: v for k, v in payload.items() if v is not None}).encode()
    req = urllib.request.Request(
        base.rstrip("/") + "/" + name, data=body, method="POST",
        headers={"content-type": "application/json", "authorization": "Bearer " + token})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler(_proxies))
    try:
        with opener.open(req, timeout=600) as res:
            status, raw = res.status, res.read()
    except urllib.error.HTTPError as err:
        status, raw = err.code, err.read()
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError:
        parsed = raw.decode("utf-8", "replace")
    return {"status": status, "body": parsed}


def generate_text(prompt, model_alias=None, model=None, system=None, max_output_tokens=None,
                  temperature=None, reasoning=None):
    return _helper("generate_text", dict(
        prompt=prompt, model_alias=model_alias, model=model, system=system,
        max_output_tokens=max_output_tokens, temperature=temperature, reasoning=reasoning))


def call(capability, path, body=None, method=None, max_price_micros=None):
    return _helper("call", dict(capability=capability, path=path, body=body, method=method,
                                max_price_micros=max_price_micros))


def store_artifact(name, data, content_type=None, stable=False):
    if isinstance(data, (bytes, bytearray, memoryview)):
        payload = dict(name=name, data_base64=base64.b64encode(bytes(data)).decode())
    else:
        payload = dict(name=name, data=str(data))
    return _helper("store_artifact", dict(payload, content_type=content_type, stable=bool(stable)))


def request_continuation(delay_sec=0):
    return _helper("request_continuation", dict(delay_sec=delay_sec))


HELPERS = dict(generate_text=generate_text, call=call, store_artifact=store_artifact,
               request_continuation=request_continuation)


def main():
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    status = Status(cfg.get("statusFd"))
    status.send("hello", runtime="python", version=platform.python_version())
    if cfg.get("proxySocket"):
        start_forwarder(cfg["proxySocket"], int(cfg.get("proxyPort") or 3128))

    deps = cfg.get("dependencies") or []
    if deps:
        status.send("install_start")
        ok = install(cfg, deps)
        status.send("install_done", ok=ok)
        if not ok:
            print("=== agent-gateway: dependency install failed ===", file=sys.stderr, flush=True)
            sys.exit(1)

    for name, fn in HELPERS.items():
        setattr(builtins, name, fn)
    entry = cfg["entrypoint"]
    sys.argv = [entry]
    # -I ignored PYTHONPATH and left out the script dir; add them as `python3 main.py` would.
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
    sys.path[:0] = [os.path.dirname(entry), *extra]
    sys.stdout.reconfigure(line_buffering=True)
    print(SENTINEL, flush=True)
    status.send("program_start")
    status.close()
    runpy.run_path(entry, run_name="__main__")


if __name__ == "__main__":
    main()
