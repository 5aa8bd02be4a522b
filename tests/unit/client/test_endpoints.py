"""Several --host URLs: parsing and its one-line errors, labels, credentials, and the endpoint policies."""

from __future__ import annotations

from collections import Counter

import pytest

from vllm_users.client.endpoints import (
    STICKY_SESSIONS,
    Chooser,
    endpoint_label,
    endpoint_labels,
    fleet_connection,
    host_urls,
    primary_host,
    redact_hosts,
)
from vllm_users.client.options import ServerOptions
from vllm_users.client.stream import REPLICA_MAX, replica_of
from vllm_users.errors import UsageError
from vllm_users.redact import connection_headers

A, B, C = "http://127.0.0.1:8001", "http://127.0.0.1:8002", "https://gpu-3.example:443/v1"


def test_comma_list_and_file(tmp_path) -> None:
    assert host_urls(f"{A}, {B} ,{C}") == [A, B, C]
    f = tmp_path / "fleet.txt"
    f.write_text(f"# the fleet\n{A}\n\n{B}  # rack 2\n")
    assert host_urls(f"@{f}") == [A, B]
    assert host_urls("") == [] and host_urls(A) == [A]


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("http://127.0.0.1:8001,ftp://u:secret@x:1", "'ftp://x:1'"),
        ("http://127.0.0.1:8001,http://u:secret@:8002", "'http://:8002'"),
        ("http://127.0.0.1:8001,,http://127.0.0.1:8002", "'(empty)'"),
        ("http://127.0.0.1:8001,http://u:secret@127.0.0.1:port", "'http://127.0.0.1:port'"),
        ("http://127.0.0.1:8001,http://127.0.0.1:8001/", "127.0.0.1:8001 is named twice"),
    ],
)
def test_a_bad_url_is_one_line_naming_it_without_credentials(text: str, named: str) -> None:
    with pytest.raises(UsageError) as e:
        host_urls(text)
    msg = str(e.value)
    assert named in msg and "secret" not in msg and "\n" not in msg
    with pytest.raises(UsageError):  # the option group's check says the same
        ServerOptions(host=text).check()


def test_an_unreadable_or_empty_file(tmp_path) -> None:
    with pytest.raises(UsageError, match="cannot read it"):
        host_urls(f"@{tmp_path / 'none.txt'}")
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n")
    with pytest.raises(UsageError, match="names no URL"):
        host_urls(f"@{empty}")


def test_labels_never_hold_credentials() -> None:
    assert endpoint_label("http://u:pw@10.0.0.1:8000/") == "10.0.0.1:8000"
    assert endpoint_label("https://gpu.example") == "gpu.example:443"
    assert endpoint_label(C) == "gpu-3.example:443/v1"
    assert endpoint_label("http://[::1]:9000") == "[::1]:9000"
    assert endpoint_labels(f"{A},{B}") == ["127.0.0.1:8001", "127.0.0.1:8002"]
    assert endpoint_labels("not a url") == []  # a plain locust's own host: no labels, no error
    assert redact_hosts("http://u:pw@a:1,http://v:pw2@b:2") == "http://a:1,http://b:2"
    assert primary_host(f"{A},{B}") == A and primary_host(A) == A


def test_credentials_one_url_as_before_several_must_agree() -> None:
    one = "http://user:pass@127.0.0.1:8001"
    assert fleet_connection(one, {"X-A": "b"}, None) == connection_headers(one, {"X-A": "b"}, None)
    host, headers = fleet_connection("http://user:pass@a:1,http://user:pass@b:2")
    assert host == "http://a:1,http://b:2" and headers["Authorization"].startswith("Basic ")
    with pytest.raises(UsageError, match="different credentials") as e:
        fleet_connection("http://user:pass@a:1,http://b:2")
    assert "pass" not in str(e.value)
    # an API key wins over userinfo on every URL: the same headers, no conflict
    assert fleet_connection("http://user:pass@a:1,http://b:2", None, "k")[1] == {"Authorization": "Bearer k"}


def test_round_robin_spreads_evenly() -> None:
    ch = Chooser(3)
    assert [ch.choose() for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    ch = Chooser(3)
    assert Counter(ch.choose(str(s)) for s in range(300)) == {
        0: 100,
        1: 100,
        2: 100,
    }  # new sessions: by policy


def test_random_is_seeded_and_reaches_every_endpoint() -> None:
    a = [Chooser(4, "random", 7).choose() for _ in range(1)]
    ch1, ch2 = Chooser(4, "random", 7), Chooser(4, "random", 7)
    seq = [ch1.choose() for _ in range(400)]
    assert seq == [ch2.choose() for _ in range(400)] and a[0] == seq[0]
    counts = Counter(seq)
    assert set(counts) == {0, 1, 2, 3} and min(counts.values()) > 60  # 100 each expected


def test_least_inflight_takes_the_idlest_ties_round_robin() -> None:
    ch = Chooser(3, "least-inflight")
    ch.inflight[:] = [2, 0, 1]
    assert ch.choose() == 1
    ch.inflight[:] = [1, 1, 1]
    picks = [ch.choose() for _ in range(3)]
    assert sorted(picks) == [0, 1, 2]  # a tie does not always go to the first


@pytest.mark.parametrize("policy", ["round-robin", "random", "least-inflight", "session"])
def test_a_session_stays_on_its_first_endpoint_whatever_the_policy(policy: str) -> None:
    ch = Chooser(3, policy, 1)
    first = {s: ch.choose(f"s{s}") for s in range(30)}
    assert len(set(first.values())) > 1  # sessions are spread...
    ch.inflight[:] = [5, 0, 9]
    for turn in range(4):  # ...and each one's later turns follow its first, interleaved with others
        for s in range(30):
            assert ch.choose(f"s{s}") == first[s], (policy, s, turn)


def test_session_policy_is_a_stable_hash_over_processes() -> None:
    a, b = Chooser(3, "session"), Chooser(3, "session")
    for _ in range(5):
        b.choose()  # another process's history does not move a session
    keys = [f"prefix:{i}" for i in range(50)]
    assert [a.choose(k) for k in keys] == [b.choose(k) for k in reversed(keys)][::-1]


def test_sticky_sessions_are_bounded() -> None:
    ch = Chooser(2)
    for s in range(STICKY_SESSIONS + 10):
        ch.choose(str(s))
    assert len(ch._sessions) == STICKY_SESSIONS and "0" not in ch._sessions


def test_one_endpoint_and_a_bad_policy() -> None:
    assert {Chooser(1, "random").choose(str(i)) for i in range(10)} == {0}
    with pytest.raises(UsageError, match="expected one of"):
        Chooser(2, "fastest")


def test_replica_header_value() -> None:
    assert replica_of("pod-7 ") == "pod-7" and replica_of(["a", "b"]) == "a"
    assert replica_of(None) is None and replica_of("") is None and replica_of([]) is None
    assert replica_of("x" * 500) == "x" * REPLICA_MAX
