"""A container's probes run as the kubelet runs them, from outside the pod to its IP: httpGet succeeds on a status
200-399 within timeoutSeconds, tcpSocket on a connection; a named port is the container's port of that name.
(podman 4.3 cannot run them: podman_gaps.py.)"""

from __future__ import annotations

import http.client
import socket
import ssl


def port_number(container: dict, port) -> int:
    if isinstance(port, int):
        return port
    [number] = [p["containerPort"] for p in container.get("ports", []) if p.get("name") == port]
    return number


def http_get(address: str, port: int, action: dict, timeout: float) -> bool:
    if action.get("scheme", "HTTP") == "HTTPS":
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # as the kubelet: no verification
        connection = http.client.HTTPSConnection(address, port, timeout=timeout, context=context)
    else:
        connection = http.client.HTTPConnection(address, port, timeout=timeout)
    try:
        connection.request("GET", action.get("path", "/"))
        return 200 <= connection.getresponse().status < 400
    except OSError:
        return False
    finally:
        connection.close()


def tcp_socket(address: str, port: int, timeout: float) -> bool:
    try:
        socket.create_connection((address, port), timeout=timeout).close()
        return True
    except OSError:
        return False


def passes(address: str, container: dict, probe: dict) -> bool:
    """One run of probe against the container at address."""
    timeout = probe.get("timeoutSeconds", 1)
    if "httpGet" in probe:
        action = probe["httpGet"]
        return http_get(address, port_number(container, action["port"]), action, timeout)
    if "tcpSocket" in probe:
        return tcp_socket(address, port_number(container, probe["tcpSocket"]["port"]), timeout)
    raise AssertionError(f"a probe this test cannot run: {probe}")


def patience(probe: dict) -> float:
    """Seconds the kubelet gives a container before a failing probe acts on it (a liveness restart)."""
    return probe.get("initialDelaySeconds", 0) + probe.get("periodSeconds", 10) * probe.get("failureThreshold", 3)
