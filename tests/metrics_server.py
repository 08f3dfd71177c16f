"""Real HTTP servers on 127.0.0.1 for the monitoring tests, serving dcgm-exporter pages
built from the real samples in tests/corpus/dcgm_exporter.

A page is what dcgm-exporter writes: per field of its default counters file, `# HELP` and
`# TYPE`, then one line per GPU with the label set of a current exporter (gpu, UUID,
pci_bus_id, device, modelName, Hostname: NVIDIA/dcgm-exporter#736's sample) and the value
the real samples hold for that field (NVIDIA's A100 sample first, then the V100 and mixed
ones; 0 for the few fields no sample has). The energy counter advances with each request
unless the page is meant to be stale, as a real exporter's does with each collection.

Also a command line, used to record the fixtures/monitoring-* folders::

    python -m tests.metrics_server --scenario healthy --port 9400
    python -m tests.metrics_server --port 0 --hostengine-port 5555    # a listener on 5555
    python -m tests.metrics_server --nvml-record > probes/nvml.json   # that node's GPUs
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

CORPUS_DIR = Path(__file__).resolve().parent / "corpus" / "dcgm_exporter"
MIG_A100 = CORPUS_DIR / "nvidia-docs-dcgm-exporter-mig-a100-sample.prom.txt"
V100 = CORPUS_DIR / "dcgm-exporter-issue250-v100-excerpt.prom.txt"
MIXED_MIG = CORPUS_DIR / "dcgm-exporter-issue736-mixed-rtx2000ada-a30mig-excerpt.prom.txt"
README = CORPUS_DIR / "dcgm-exporter-readme-quickstart-sample.prom.txt"

# The active rows of dcgm-exporter's etc/default-counters.csv: field, Prometheus type, help.
DEFAULT_COUNTERS = [
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "Total number of NVLink bandwidth counters for all lanes"),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
]
ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
_LINE = re.compile(r"^(DCGM_\w+)\{(.*)\} (\S+)\s*$")


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    pci_bus_id: str
    model: str


def _fixture_gpus() -> tuple[Gpu, ...]:
    # An 8x A100-SXM4-80GB node. Real UUIDs where the corpus has them: GPU 0 is the A100 of
    # nvidia_smi/telegraf-nvidia-smi-q-x-A100-SXM4-80GB-535, GPUs 6 and 7 those of the Azure
    # node in nvidia_smi/azurehpc-nvidia-smi-nvlink-s-8xA100-{bad,good}; GPUs 1-5 get UUIDs in
    # the same format, made from the node name and index. The PCI bus ids are those of the
    # 8-GPU Azure node in nvidia_smi/azurehpc-nvsmi-q-retired-pages-8gpu-535.
    known = {
        0: "GPU-513536b6-7d19-9063-b049-1e69664bb298",
        6: "GPU-9667d95e-6d22-0c22-1f57-c481f13e7c44",
        7: "GPU-c7e253b0-c227-6f10-e860-7482c85e7ce8",
    }
    uuids = [known.get(i) or f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'gpu201.gpu{i}')}" for i in range(8)]
    return tuple(Gpu(i, u, f"0000000{i + 1}:00:00.0", "NVIDIA A100-SXM4-80GB") for i, u in enumerate(uuids))


#: The GPUs of the recorded monitoring fixtures (host gpu201 and its failure copies).
FIXTURE_GPUS = _fixture_gpus()
FIXTURE_HOST = "gpu201"


def real_values() -> dict[str, str]:
    """Field -> its value as written in the real samples (GPU-level series; first sample wins)."""
    values: dict[str, str] = {}
    for path in (MIG_A100, V100, MIXED_MIG):
        for line in path.read_text().splitlines():
            m = _LINE.match(line)
            if m and "GPU_I_ID" not in m.group(2):
                values.setdefault(m.group(1), m.group(3))
    return values


def nvml_record(gpus: Sequence[Gpu]) -> dict[str, object]:
    """The `nvml` probe's record of a node with these GPUs.

    Made from the real A100-SXM4-80GB of nvidia_smi/telegraf-nvidia-smi-q-x-A100-SXM4-80GB-535
    as the probe's own parser reads it, one copy per GPU with its index, UUID and bus id,
    and MIG off (that GPU had MIG on; the fixture node's exporter pages have no MIG series).
    """
    import dataclasses

    from clustercheck.probes.nvml import parse_nvidia_smi_xml

    xml = CORPUS_DIR.parent / "nvidia_smi" / "telegraf-nvidia-smi-q-x-A100-SXM4-80GB-535.xml.txt"
    real = parse_nvidia_smi_xml(xml.read_text())
    (template,) = real.gpus
    copies = tuple(
        dataclasses.replace(
            template, index=g.index, uuid=g.uuid, pci_bus_id=g.pci_bus_id, mig_current=False, mig_pending=False
        )
        for g in gpus
    )
    return dataclasses.replace(real, gpus=copies).to_json()


def build_page(
    gpus: Sequence[Gpu],
    *,
    hostname: str = FIXTURE_HOST,
    scrape: int = 1,
    fresh: bool = True,
    omit_gpus: Sequence[int] = (),
    omit_fields: Sequence[str] = (),
) -> str:
    """A dcgm-exporter page for `gpus` as scrape number `scrape` sees it.

    `fresh`: the energy counter grows by 2 kJ per scrape (400 W over 5 s); otherwise it is
    frozen, as on an exporter that lost its host engine. `omit_gpus` (indexes) and
    `omit_fields` leave series out, as a partial exporter does.
    """
    values = real_values()
    out = []
    for name, kind, help_text in DEFAULT_COUNTERS:
        if name in omit_fields:
            continue
        out.append(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n")
        for g in gpus:
            if g.index in omit_gpus:
                continue
            labels = (
                f'gpu="{g.index}",UUID="{g.uuid}",pci_bus_id="{g.pci_bus_id}",device="nvidia{g.index}",'
                f'modelName="{g.model}",Hostname="{hostname}"'
            )
            value = values.get(name, "0")
            if name == ENERGY:
                value = str(int(value) + g.index * 1_000_003 + (2_000_000 * (scrape - 1) if fresh else 0))
            out.append(f"{name}{{{labels}}} {value}\n")
    return "".join(out)


class MetricsServer:
    """A real HTTP server on 127.0.0.1: `page(n)` answers the n-th GET of /metrics (from 1).

    `page` may return bytes (sent as they are). Other paths get 404. The User-Agent of each
    request is kept in `agents`.
    """

    def __init__(self, page: Callable[[int], str | bytes], *, port: int = 0) -> None:
        self.page = page
        self.agents: list[str] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                with server._lock:
                    server.agents.append(self.headers.get("User-Agent", ""))
                    number = len(server.agents)
                body = server.page(number)
                data = body if isinstance(body, bytes) else body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/metrics"
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="metrics-server", daemon=True
        )

    def __enter__(self) -> MetricsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@contextmanager
def silent_server() -> Iterator[str]:
    """A server that accepts connections and never answers; yields its /metrics URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            held.append(conn)  # keep it open, say nothing

    thread = threading.Thread(target=accept, name="silent-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/metrics"
    finally:
        stop.set()
        thread.join(2)
        for conn in held:
            conn.close()
        listener.close()


def refused_url() -> str:
    """A /metrics URL on a loopback port nothing listens on (connections are refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/metrics"


SCENARIOS: dict[str, Callable[[int], str]] = {
    "healthy": lambda n: build_page(FIXTURE_GPUS, scrape=n),
    "gpu-missing": lambda n: build_page(FIXTURE_GPUS, scrape=n, omit_gpus=[3]),
    "no-xid": lambda n: build_page(FIXTURE_GPUS, scrape=n, omit_fields=["DCGM_FI_DEV_XID_ERRORS"]),
    "stale": lambda n: build_page(FIXTURE_GPUS, scrape=n, fresh=False),
}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default="healthy")
    parser.add_argument("--port", type=int, default=9400, help="0: serve no page (only --hostengine-port)")
    parser.add_argument("--hostengine-port", type=int, default=0, help="also hold a TCP listener on this port")
    parser.add_argument("--nvml-record", action="store_true", help="print the fixture node's nvml probe record")
    args = parser.parse_args(argv)
    if args.nvml_record:
        print(json.dumps(nvml_record(FIXTURE_GPUS), indent=2, sort_keys=True))
        return
    engine = None
    if args.hostengine_port:
        engine = socket.socket()
        engine.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        engine.bind(("127.0.0.1", args.hostengine_port))
        engine.listen(4)
    try:
        if args.port:
            with MetricsServer(SCENARIOS[args.scenario], port=args.port) as server:
                print(f"serving {args.scenario} at {server.url}", flush=True)
                _wait()
        else:
            _wait()
    finally:
        if engine is not None:
            engine.close()


def _wait() -> None:
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
