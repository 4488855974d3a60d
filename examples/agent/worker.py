#!/usr/bin/env python3
"""A worker instance for the autoscaled-agent example (stdlib only).

    worker.py DIR NAME

Serves GET /metrics on 127.0.0.1:<free port> with
  worker_load                 the total load in DIR/load (missing or garbage: 0) divided by
                              the live workers (the *.port files in DIR/workers, at least 1):
                              a load balancer spreading the load evenly over the instances;
  process_cpu_seconds_total   CPU seconds used, as a counter: the service's total CPU in
                              DIR/cpu (millicores, e.g. 2700) shared evenly by the live
                              workers, integrated over time (simulated: nothing is burnt);
  http_requests_total         requests served, as a counter: DIR/rps (requests per second
                              for the whole service) shared the same way;
  process_start_time_seconds  when this process started (unix seconds).
Writes DIR/workers/NAME.port (atomically, once bound: its presence means "serving") and
NAME.pid; removes both on SIGTERM/SIGINT and exits 0.
"""
import http.server
import os
import signal
import sys
import threading
import time

START = time.time()


def write_atomic(path, text):
    # tmp + rename, so readers (scale.sh, other workers) never see a half-written file
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: worker.py DIR NAME")
    base, name = sys.argv[1], sys.argv[2]
    workers = os.path.join(base, "workers")
    os.makedirs(workers, exist_ok=True)
    port_file = os.path.join(workers, name + ".port")
    pid_file = os.path.join(workers, name + ".pid")

    def share(file):
        """This worker's share of the total in DIR/file (missing or garbage: 0)."""
        try:
            with open(os.path.join(base, file)) as f:
                total = float(f.read().strip())
        except (OSError, ValueError):
            return 0.0
        if total != total or total in (float("inf"), float("-inf")):
            return 0.0  # nan/inf from a garbage file count as garbage
        live = sum(1 for n in os.listdir(workers) if n.endswith(".port"))
        return total / max(live, 1)

    # The counters, advanced at each scrape by the share in force since the previous one.
    counters = {"cpu": 0.0, "requests": 0.0, "at": time.time()}
    lock = threading.Lock()

    def advance():
        with lock:
            now = time.time()
            dt = max(now - counters["at"], 0.0)
            counters["at"] = now
            counters["cpu"] += share("cpu") / 1000.0 * dt
            counters["requests"] += share("rps") * dt
            return counters["cpu"], counters["requests"]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.split("?", 1)[0] != "/metrics":
                self.send_error(404)
                return
            cpu, requests = advance()
            body = (
                "# HELP worker_load Load on this instance (total load / live instances).\n"
                "# TYPE worker_load gauge\n"
                f"worker_load {share('load')!r}\n"
                "# HELP process_cpu_seconds_total CPU time used (simulated from DIR/cpu).\n"
                "# TYPE process_cpu_seconds_total counter\n"
                f"process_cpu_seconds_total {cpu!r}\n"
                "# HELP http_requests_total Requests served (simulated from DIR/rps).\n"
                "# TYPE http_requests_total counter\n"
                f"http_requests_total {requests!r}\n"
                "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n"
                "# TYPE process_start_time_seconds gauge\n"
                f"process_start_time_seconds {START!r}\n"
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass  # no access log: Prometheus scrapes every second

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    def stop(*_):
        for p in (port_file, pid_file):
            try:
                os.remove(p)
            except FileNotFoundError:
                pass
        os._exit(0)  # serve_forever() cannot be shut down from its own thread

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    write_atomic(pid_file, f"{os.getpid()}\n")
    write_atomic(port_file, f"{server.server_address[1]}\n")
    server.serve_forever()


if __name__ == "__main__":
    main()
