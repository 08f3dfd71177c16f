"""monitoring.dcgm_exporter's fetch for nodes with neither curl nor wget (checks/monitoring.py).

Run on the node as `python3 -c TEXT URL TIMEOUT AGENT`: the page to stdout, the error on stderr,
exit 1. No proxy: Prometheus scrapes the exporter directly, and an http_proxy set for the outside
world would otherwise swallow the request. Standard library only; Python 3.6+.
"""

import sys
import urllib.request as u


def main() -> None:
    url, timeout, agent = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    try:
        request = u.Request(url, headers={"User-Agent": agent})
        page = u.build_opener(u.ProxyHandler({})).open(request, timeout=timeout)
        sys.stdout.write(page.read().decode("utf-8", "replace"))
    except Exception as e:
        sys.stderr.write(f"{type(e).__name__}: {e}\n")
        sys.exit(1)


if __name__ == "__main__":
    main()
