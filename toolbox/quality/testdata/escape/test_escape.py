# Hostile test code: everything here tries to leave the sandbox. The Go test
# that runs it checks on the host that nothing happened.
import json
import os
import socket

HERE = os.path.dirname(os.path.abspath(__file__))
CFG = json.load(open(os.path.join(HERE, "canary.json")))


def test_read_canary():
    try:
        print("read:", open(CFG["file"]).read())
    except OSError as e:
        print("read failed:", e)


def test_overwrite_canary():
    try:
        with open(CFG["file"], "w") as f:
            f.write("pwned")
    except OSError as e:
        print("overwrite failed:", e)


def test_write_outside():
    for p in (CFG["outside"], os.path.join(HERE, "..", "escaped.txt"), os.path.join(HERE, "planted.txt")):
        try:
            with open(p, "w") as f:
                f.write("pwned")
        except OSError as e:
            print("write failed:", p, e)


def test_connect_listener():
    for host in ("127.0.0.1", CFG.get("host_ip", "172.17.0.1")):
        try:
            socket.create_connection((host, CFG["port"]), timeout=2).sendall(b"pwned")
        except OSError as e:
            print("connect failed:", host, e)


def test_snapshots_hidden():
    # The engine's .aetherium directory (edit snapshots) is covered by an
    # empty tmpfs: the planted snapshot must not be visible.
    assert not os.path.exists(os.path.join(HERE, "..", ".aetherium", "snapshot.txt"))
