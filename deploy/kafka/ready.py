"""Exit 0 if a Kafka broker answers a Metadata request with a live broker.

Usage: python3 deploy/kafka/ready.py HOST:PORT

Standard library only (used by deploy/kafka.sh before any venv exists).
Sends Metadata v1 for no topics; a KRaft broker only lists itself once it
has registered with the controller and been unfenced, so "one broker and a
known controller" means it is ready for clients.
"""

import socket
import struct
import sys


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def metadata(host: str, port: int, timeout: float = 2.0) -> tuple[int, int]:
    """Return (number of live brokers, controller id)."""
    # Header: api_key=3 (Metadata), api_version=1, correlation_id, client_id.
    # Body: topics array of length 0 (v1: empty array = no topics).
    req = struct.pack(">hhi", 3, 1, 7) + _string("memledger-ready") + struct.pack(">i", 0)
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(struct.pack(">i", len(req)) + req)
        size = struct.unpack(">i", _recv(sock, 4))[0]
        buf = _recv(sock, size)
    pos = 4  # skip correlation_id
    (n_brokers,) = struct.unpack_from(">i", buf, pos)
    pos += 4
    for _ in range(n_brokers):
        pos += 4  # node_id
        (hlen,) = struct.unpack_from(">h", buf, pos)
        pos += 2 + hlen + 4  # host, port
        (rlen,) = struct.unpack_from(">h", buf, pos)
        pos += 2 + max(rlen, 0)  # nullable rack
    (controller,) = struct.unpack_from(">i", buf, pos)
    return n_brokers, controller


def _recv(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("connection closed")
        data += chunk
    return data


def main() -> int:
    host, _, port = sys.argv[1].rpartition(":")
    try:
        brokers, controller = metadata(host, int(port))
    except (OSError, struct.error):
        return 1
    return 0 if brokers >= 1 and controller >= 0 else 1


if __name__ == "__main__":
    sys.exit(main())
