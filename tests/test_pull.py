"""``clawdesk pull``: fake hub, real huggingface_hub against a local HTTP hub, and the unreachable hub.

No test touches the network. The real :func:`hub_download` (huggingface_hub's ``get_hf_file_metadata``
and ``http_get``) runs against (a) a local HTTP server that speaks the bits of the Hub protocol a
single-file download needs and can hang up mid-file, (b) offline mode, and (c) a port that refuses
connections. huggingface_hub reads HF_HUB_OFFLINE / HF_ENDPOINT / *_TIMEOUT into
``huggingface_hub.constants`` at import time (measured: ``setenv`` afterwards changes nothing), so
in-process tests patch the constants or pass ``endpoint=``; one subprocess test sets the real
environment variable the way a person would.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import http.server
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pytest

from clawdesk import models
from clawdesk.errors import DataDirError, PullError
from clawdesk.models import KnownModel
from clawdesk.pull import BAD_SUFFIX, STAGING_DIRNAME, hub_download, partial_path, pull_model, sha256_file

NAME = "tiny-test"
REPO = "clawdesk-test/tiny"
FILENAME = "tiny.gguf"
# Just over 3 MiB: several 1 MiB hash blocks and a ragged last one.
PAYLOAD = (b"GGUF" + bytes(range(256)) * 12_300)[: 3 * (1 << 20) + 1234]
MIB = 1 << 20


@pytest.fixture
def tiny(monkeypatch) -> KnownModel:
    """A known model whose size and sha256 match PAYLOAD, registered for the test only."""
    known = KnownModel(
        name=NAME,
        repo_id=REPO,
        filename=FILENAME,
        size=len(PAYLOAD),
        sha256=hashlib.sha256(PAYLOAD).hexdigest(),
        description="test payload",
    )
    monkeypatch.setitem(models.KNOWN_MODELS, NAME, known)
    return known


def part_of(models_dir: Path) -> Path:
    return models_dir / STAGING_DIRNAME / (FILENAME + ".part")


class FakeHub:
    """A stand-in for ``hub_download`` that copies from a local "hub" folder, from the resume offset on."""

    def __init__(self, root: Path, chunk: int = 256 * 1024):
        self.root = root
        self.chunk = chunk
        self.starts: list[int] = []  # resume_size of each call
        self.fail_after: int | None = None  # raise ``failure`` once the file holds this many bytes
        self.failure: BaseException = ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")

    @property
    def calls(self) -> int:
        return len(self.starts)

    def publish(self, data: bytes) -> None:
        path = self.root / REPO / FILENAME
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    def __call__(self, known: KnownModel, out: BinaryIO, resume_size: int, progress) -> None:
        self.starts.append(resume_size)
        data = (self.root / known.repo_id / known.filename).read_bytes()
        progress(resume_size, len(data))
        for start in range(resume_size, len(data), self.chunk):
            if self.fail_after is not None and start >= self.fail_after:
                raise self.failure
            block = data[start : start + self.chunk]
            out.write(block)
            progress(start + len(block), len(data))


@pytest.fixture
def hub(tmp_path) -> FakeHub:
    fake = FakeHub(tmp_path / "hub")
    fake.publish(PAYLOAD)
    return fake


class Recorder:
    def __init__(self):
        self.progress: list[tuple[int, int]] = []
        self.status: list[str] = []

    def on_progress(self, done: int, total: int) -> None:
        self.progress.append((done, total))

    def on_status(self, message: str) -> None:
        self.status.append(message)


def pull(models_dir: Path, rec: Recorder, **kwargs) -> Path:
    return pull_model(NAME, models_dir, progress=rec.on_progress, status=rec.on_status, **kwargs)


# -- happy path -----------------------------------------------------------------------------


def test_pull_installs_verified_file_with_progress_then_second_pull_is_a_noop(tiny, hub, tmp_path):
    models_dir = tmp_path / "data" / "models"  # does not exist yet: pull creates it
    rec = Recorder()

    path = pull(models_dir, rec, download=hub)

    assert path == models_dir / FILENAME
    assert path.read_bytes() == PAYLOAD
    assert hub.starts == [0]
    # Download phase then hash phase, each ending at (size, size); "done" never runs backwards in a phase.
    totals = {total for _, total in rec.progress}
    assert totals == {len(PAYLOAD)}
    ends = [i for i, (done, total) in enumerate(rec.progress) if done == total]
    assert len(ends) == 2, rec.progress
    download_phase = rec.progress[: ends[0] + 1]
    hash_phase = rec.progress[ends[0] + 1 :]
    assert [d for d, _ in download_phase] == sorted(d for d, _ in download_phase)
    assert [d for d, _ in hash_phase] == sorted(d for d, _ in hash_phase)
    assert len(hash_phase) == 4  # 3 full MiB blocks + the ragged one
    assert any("verifying sha256" in s for s in rec.status)
    assert not (models_dir / STAGING_DIRNAME).exists()

    again = Recorder()
    assert pull(models_dir, again, download=hub) == path
    assert hub.calls == 1
    assert any("already downloaded" in s for s in again.status)


def test_existing_wrong_file_is_set_aside_and_downloaded_again(tiny, hub, tmp_path):
    models_dir = tmp_path / "models"
    models_dir.mkdir()
    (models_dir / FILENAME).write_bytes(PAYLOAD[:1000])  # e.g. a copy that stopped early
    rec = Recorder()

    path = pull(models_dir, rec, download=hub)

    assert path.read_bytes() == PAYLOAD
    assert (models_dir / (FILENAME + BAD_SUFFIX)).read_bytes() == PAYLOAD[:1000]
    assert hub.calls == 1
    assert any("1,000 bytes" in s and BAD_SUFFIX in s for s in rec.status)


def test_pull_name_is_case_insensitive_and_verify_false_skips_the_hash(tiny, hub, tmp_path):
    rec = Recorder()
    path = pull_model(NAME.upper(), tmp_path / "m", progress=rec.on_progress, download=hub, verify=False)
    assert path.read_bytes() == PAYLOAD
    assert [p for p in rec.progress if p == (len(PAYLOAD), len(PAYLOAD))] == [(len(PAYLOAD),) * 2]


def test_sha256_file_matches_hashlib_and_reports_progress(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(PAYLOAD)
    seen: list[tuple[int, int]] = []
    assert sha256_file(path, lambda d, t: seen.append((d, t))) == hashlib.sha256(PAYLOAD).hexdigest()
    assert seen[-1] == (len(PAYLOAD), len(PAYLOAD))


def test_partial_path_is_the_documented_stable_name(tiny, tmp_path):
    assert partial_path(tmp_path, tiny) == tmp_path / ".download" / "tiny.gguf.part"


# -- verification failures ----------------------------------------------------------------------


def test_sha_mismatch_raises_and_leaves_nothing_under_the_final_name(tiny, hub, tmp_path):
    corrupt = bytearray(PAYLOAD)
    corrupt[len(corrupt) // 2] ^= 0xFF
    hub.publish(bytes(corrupt))
    models_dir = tmp_path / "models"

    with pytest.raises(PullError) as info:
        pull(models_dir, Recorder(), download=hub)

    message = str(info.value)
    assert "sha256" in message and tiny.sha256 in message
    assert "earlier" not in message  # all of it came from this pull
    bad = models_dir / (FILENAME + BAD_SUFFIX)
    assert str(bad) in message
    assert not (models_dir / FILENAME).exists()
    assert bad.read_bytes() == bytes(corrupt)
    assert not part_of(models_dir).exists()  # or the next pull would resume from a bad file

    # The next pull downloads again from the start (the hub is fixed) and installs the good file.
    hub.publish(PAYLOAD)
    assert pull(models_dir, Recorder(), download=hub).read_bytes() == PAYLOAD
    assert hub.starts == [0, 0]


def test_size_mismatch_raises_before_hashing(tiny, hub, tmp_path):
    hub.publish(PAYLOAD[:-10])
    models_dir = tmp_path / "models"
    rec = Recorder()

    with pytest.raises(PullError, match=f"has {len(PAYLOAD) - 10:,} bytes instead of {len(PAYLOAD):,}"):
        pull(models_dir, rec, download=hub)

    assert not (models_dir / FILENAME).exists()
    assert (models_dir / (FILENAME + BAD_SUFFIX)).stat().st_size == len(PAYLOAD) - 10
    assert not any("verifying" in s for s in rec.status)


def test_unknown_name_lists_known_models_and_touches_nothing(tmp_path):
    with pytest.raises(PullError) as info:
        pull_model("llama-9000", tmp_path / "models", download=FakeHub(tmp_path))
    assert "llama-9000" in str(info.value)
    assert "qwen3-4b" in str(info.value)
    assert "--model PATH" in str(info.value)
    assert not (tmp_path / "models").exists()


def test_unwritable_models_dir_raises_data_dir_error(tiny, hub, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(DataDirError, match="models directory"):
        pull_model(NAME, blocker / "models", download=hub)
    assert hub.calls == 0


# -- interrupted downloads and resume (fake hub) ------------------------------------------------------


def test_failed_download_keeps_the_part_file_and_the_next_pull_resumes_from_it(tiny, hub, tmp_path):
    hub.fail_after = MIB
    models_dir = tmp_path / "models"
    part = part_of(models_dir)

    with pytest.raises(PullError) as info:
        pull(models_dir, Recorder(), download=hub)

    message = str(info.value)
    assert "Connection reset by peer" in message
    assert f"1.0 of 3.1 MB is kept in {part}" in message
    assert f"the next `clawdesk pull {NAME}` resumes from 1.0 MB" in message
    assert str(models_dir / FILENAME) in message
    assert not (models_dir / FILENAME).exists()
    assert part.read_bytes() == PAYLOAD[:MIB]

    hub.fail_after = None
    rec = Recorder()
    path = pull(models_dir, rec, download=hub)

    assert path.read_bytes() == PAYLOAD
    assert hub.starts == [0, MIB]
    assert rec.progress[0] == (MIB, len(PAYLOAD))  # the bar starts where the last pull stopped
    assert any(s.startswith("resuming") and "1.0 of 3.1 MB" in s for s in rec.status)
    assert not (models_dir / STAGING_DIRNAME).exists()


def test_disk_full_is_reported_as_a_disk_problem_and_keeps_what_was_saved(tiny, hub, tmp_path):
    hub.fail_after = 2 * MIB
    hub.failure = OSError(errno.ENOSPC, "No space left on device")
    models_dir = tmp_path / "models"

    with pytest.raises(PullError) as info:
        pull(models_dir, Recorder(), download=hub)

    message = str(info.value)
    assert "No space left on device" in message and "free space" in message
    assert "0.0 GB more free" in message  # 3.1 MB total, 2.1 MB already saved
    assert f"2.1 of 3.1 MB is kept in {part_of(models_dir)}" in message
    assert "hub could not be reached" not in message


def test_part_file_larger_than_the_model_is_discarded_with_a_message(tiny, hub, tmp_path):
    models_dir = tmp_path / "models"
    part = part_of(models_dir)
    part.parent.mkdir(parents=True)
    part.write_bytes(PAYLOAD + b"left over from something else")
    rec = Recorder()

    path = pull(models_dir, rec, download=hub)

    assert path.read_bytes() == PAYLOAD
    assert hub.starts == [0]  # nothing of the stale file was reused
    [said] = [s for s in rec.status if s.startswith("discarded")]
    assert str(part) in said and f"more than the {len(PAYLOAD):,}" in said


def test_corrupt_part_file_fails_the_sha_check_is_discarded_and_the_error_says_so(tiny, hub, tmp_path):
    models_dir = tmp_path / "models"
    part = part_of(models_dir)
    part.parent.mkdir(parents=True)
    damaged = bytearray(PAYLOAD[:MIB])
    damaged[100] ^= 0xFF
    part.write_bytes(bytes(damaged))

    with pytest.raises(PullError) as info:
        pull(models_dir, Recorder(), download=hub)

    message = str(info.value)
    assert hub.starts == [MIB]  # it did resume from the (damaged) partial file
    assert f"sha256 {hashlib.sha256(bytes(damaged) + PAYLOAD[MIB:]).hexdigest()}" in message
    assert "first 1.0 MB of it came from an earlier, interrupted pull" in message
    assert "discarded, so the next pull starts from the beginning" in message
    assert not part.exists()
    assert not (models_dir / FILENAME).exists()

    assert pull(models_dir, Recorder(), download=hub).read_bytes() == PAYLOAD
    assert hub.starts == [MIB, 0]


# -- the real hub_download (huggingface_hub's http_get) against a local HTTP "hub" ------------------


class _LocalHubHandler(http.server.BaseHTTPRequestHandler):
    """Serves ``/<repo>/resolve/main/<file>`` with the headers huggingface_hub reads; honours Range."""

    server: _LocalHub

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _serve(self, *, body: bool) -> None:
        hub = self.server
        if hub.down:
            # The network is gone: hang up without answering.
            hub.hangups += 1
            self.close_connection = True
            return
        if self.path != f"/{REPO}/resolve/main/{FILENAME}":
            self.send_error(404)
            return
        data = hub.data
        start = 0
        rng = self.headers.get("Range")
        if body:
            hub.ranges.append(rng)
        if rng and not hub.ignore_range:
            start = int(rng.removeprefix("bytes=").split("-")[0])
        self.send_response(206 if start else 200)
        self.send_header("X-Repo-Commit", "c" * 40)
        self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(len(data) - start))
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        if not body:
            return
        if hub.drop_at is not None and len(hub.ranges) == 1:
            # Send part of the body, then hang up: the client sees a short read.
            self.wfile.write(data[start : hub.drop_at])
            self.wfile.flush()
            self.close_connection = True
            hub.down = hub.down_after_drop
            return
        self.wfile.write(data[start:])

    def log_message(self, *_args) -> None:  # keep test output clean
        pass


class _LocalHub(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, data: bytes, *, drop_at: int | None = None, down_after_drop: bool = False):
        super().__init__(("127.0.0.1", 0), _LocalHubHandler)
        self.data = data
        self.drop_at = drop_at  # hang up the first GET after this many bytes
        self.down_after_drop = down_after_drop  # ...and then hang up on every request, like a dead link
        self.down = False
        self.ignore_range = False  # answer 200 with the whole file, as some CDNs do
        self.ranges: list[str | None] = []  # the Range header of each GET answered
        self.hangups = 0
        self.client_gone: list[BaseException] = []

    def handle_error(self, request, client_address) -> None:
        # A client that stops reading (Ctrl-C test) makes the handler's write fail; record, don't print.
        self.client_gone.append(sys.exc_info()[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def local_hub() -> Iterator[functools.partial[_LocalHub]]:
    """Start local hubs on demand (``local_hub(data, drop_at=...)``); all are shut down after the test."""
    started: list[_LocalHub] = []

    def start(data: bytes = PAYLOAD, **kwargs) -> _LocalHub:
        server = _LocalHub(data, **kwargs)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        started.append(server)
        return server

    yield start  # type: ignore[misc]
    for server in started:
        server.shutdown()
        server.server_close()


class _NoSleep:
    """Replaces a module's ``time``: records sleeps instead of waiting, passes everything else through."""

    def __init__(self):
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)

    def __getattr__(self, name: str):
        return getattr(time, name)


@pytest.fixture
def no_hf_sleep(monkeypatch) -> _NoSleep:
    """huggingface_hub's retry back-off (1+2+4+8+8 s measured for a refused HEAD) without the waiting."""
    import huggingface_hub.file_download as hf_file_download
    import huggingface_hub.utils._http as hf_http

    shim = _NoSleep()
    monkeypatch.setattr(hf_http, "time", shim)
    monkeypatch.setattr(hf_file_download, "time", shim)
    return shim


@pytest.fixture
def small_chunks(monkeypatch) -> int:
    """http_get keeps only whole chunks it has received (10 MB by default); shrink them for a 3 MB file."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "DOWNLOAD_CHUNK_SIZE", 64 * 1024)
    return 64 * 1024


def via(server: _LocalHub) -> functools.partial:
    return functools.partial(hub_download, endpoint=server.url)


def test_http_get_resumes_a_dropped_connection_within_one_pull(tiny, tmp_path, local_hub, no_hf_sleep, small_chunks):
    server = local_hub(drop_at=MIB)
    rec = Recorder()
    models_dir = tmp_path / "models"

    path = pull(models_dir, rec, download=via(server))

    assert path == models_dir / FILENAME
    assert path.read_bytes() == PAYLOAD
    # The in-call resume huggingface_hub does: a second GET for the rest of the file.
    assert server.ranges == [None, f"bytes={MIB}-"]
    assert no_hf_sleep.sleeps == [1]
    # One bar: bytes done never exceed the file (update_transfer is not double-counted), and it ends full.
    download_phase = rec.progress[: rec.progress.index((len(PAYLOAD), len(PAYLOAD))) + 1]
    assert download_phase[0] == (0, len(PAYLOAD))
    assert max(d for d, _ in download_phase) == len(PAYLOAD)
    assert {t for _, t in download_phase} == {len(PAYLOAD)}
    assert not (models_dir / STAGING_DIRNAME).exists()


def test_hub_that_goes_away_mid_file_keeps_the_part_and_the_next_pull_sends_a_range_request(
    tiny, tmp_path, local_hub, no_hf_sleep, small_chunks
):
    server = local_hub(drop_at=MIB, down_after_drop=True)
    models_dir = tmp_path / "models"
    part = part_of(models_dir)

    with pytest.raises(PullError) as info:
        pull(models_dir, Recorder(), download=via(server))

    message = str(info.value)
    assert "the hub could not be reached" in message
    assert f"1.0 of 3.1 MB is kept in {part}, and the next `clawdesk pull {NAME}` resumes from 1.0 MB" in message
    assert part.read_bytes() == PAYLOAD[:MIB]
    assert not (models_dir / FILENAME).exists()
    assert server.hangups == len(no_hf_sleep.sleeps) == 5  # http_get's in-call retries, none of them waited

    server.down = False
    rec = Recorder()
    path = pull(models_dir, rec, download=via(server))

    assert path.read_bytes() == PAYLOAD
    assert hashlib.sha256(path.read_bytes()).hexdigest() == tiny.sha256
    assert server.ranges == [None, f"bytes={MIB}-"]  # first run's GET, then the resumed one
    assert rec.progress[0] == (MIB, len(PAYLOAD))
    assert not (models_dir / STAGING_DIRNAME).exists()


def test_ctrl_c_keeps_the_part_and_the_next_pull_resumes(tiny, tmp_path, local_hub, small_chunks):
    server = local_hub()
    models_dir = tmp_path / "models"

    def interrupt_after_a_mib(done: int, _total: int) -> None:
        if done >= MIB:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pull_model(NAME, models_dir, progress=interrupt_after_a_mib, download=via(server))

    kept = part_of(models_dir).read_bytes()
    assert 0 < len(kept) < len(PAYLOAD) and len(kept) % small_chunks == 0
    assert kept == PAYLOAD[: len(kept)]

    path = pull(models_dir, Recorder(), download=via(server))

    assert path.read_bytes() == PAYLOAD
    assert server.ranges == [None, f"bytes={len(kept)}-"]


def test_server_that_ignores_range_restarts_the_file_instead_of_appending(tiny, tmp_path, local_hub):
    server = local_hub()
    server.ignore_range = True
    models_dir = tmp_path / "models"
    part = part_of(models_dir)
    part.parent.mkdir(parents=True)
    part.write_bytes(PAYLOAD[:MIB])
    rec = Recorder()

    path = pull(models_dir, rec, download=via(server))

    assert path.read_bytes() == PAYLOAD
    assert server.ranges == [f"bytes={MIB}-"]
    assert rec.progress[0][0] == 0  # http_get rewound the file, and the bar with it


def test_changed_file_on_the_hub_is_refused_before_downloading(tiny, tmp_path, local_hub):
    changed = bytearray(PAYLOAD)
    changed[7] ^= 0xFF
    server = local_hub(bytes(changed))
    models_dir = tmp_path / "models"

    with pytest.raises(PullError) as info:
        pull(models_dir, Recorder(), download=via(server))

    message = str(info.value)
    assert f"sha256 {hashlib.sha256(bytes(changed)).hexdigest()}" in message
    assert "is not the file ClawDesk expects" in message and "Nothing was downloaded" in message
    assert server.ranges == []  # only the HEAD
    assert not (models_dir / FILENAME).exists()


# -- the real hub_download against an unreachable hub -----------------------------------------------


def _assert_clear_unreachable_message(message: str, models_dir: Path) -> None:
    assert f"{FILENAME} from the Hugging Face Hub (repo {REPO})" in message
    assert "the hub could not be reached" in message
    assert f"place it at {models_dir / FILENAME}" in message
    assert "--model PATH" in message
    assert f"clawdesk pull {NAME}" in message
    assert "Traceback" not in message


@pytest.fixture
def offline(monkeypatch) -> None:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def test_offline_mode_gives_a_clear_message_without_traceback(tiny, tmp_path, offline, capfd):
    models_dir = tmp_path / "models"

    with pytest.raises(PullError) as info:
        pull(models_dir, Recorder())

    message = str(info.value)
    _assert_clear_unreachable_message(message, models_dir)
    assert "HF_HUB_OFFLINE" in message
    assert "kept" not in message  # nothing was downloaded, so nothing to say about partial data
    assert "Traceback" not in capfd.readouterr().err
    assert not (models_dir / FILENAME).exists()


def test_connection_refused_fails_fast_with_a_clear_message(tiny, tmp_path, capfd, no_hf_sleep):
    # A bound socket that never listens: connecting to it is refused, and nobody else can take the port.
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{closed.getsockname()[1]}"
        models_dir = tmp_path / "models"
        with pytest.raises(PullError) as info:
            pull(models_dir, Recorder(), download=functools.partial(hub_download, endpoint=endpoint))

    message = str(info.value)
    _assert_clear_unreachable_message(message, models_dir)
    assert "Connection refused" in message
    assert no_hf_sleep.sleeps == [1, 2, 4, 8, 8]  # huggingface_hub retried the HEAD with back-off
    assert "Traceback" not in capfd.readouterr().err


def test_existing_part_is_kept_when_the_hub_is_unreachable(tiny, tmp_path, offline):
    models_dir = tmp_path / "models"
    part = part_of(models_dir)
    part.parent.mkdir(parents=True)
    part.write_bytes(PAYLOAD[: 2 * MIB])

    with pytest.raises(PullError) as info:
        pull(models_dir, Recorder())

    assert part.read_bytes() == PAYLOAD[: 2 * MIB]
    assert f"2.1 of 3.1 MB is kept in {part}, and the next `clawdesk pull {NAME}` resumes from 2.1 MB" in str(
        info.value
    )


def test_complete_part_is_installed_while_offline(tiny, tmp_path, offline):
    """A download that finished but was not verified (e.g. Ctrl-C while hashing) needs no network."""
    models_dir = tmp_path / "models"
    part = part_of(models_dir)
    part.parent.mkdir(parents=True)
    part.write_bytes(PAYLOAD)
    rec = Recorder()

    assert pull(models_dir, rec).read_bytes() == PAYLOAD
    assert any("completed by an earlier pull" in s for s in rec.status)


def test_hf_hub_offline_env_var_in_a_fresh_process(tmp_path):
    """The way a person sets it: HF_HUB_OFFLINE=1 before start; the real registry entry; no traceback."""
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from clawdesk.errors import PullError\n"
        "from clawdesk.pull import pull_model\n"
        "try:\n"
        "    pull_model('qwen3-4b', Path(sys.argv[1]))\n"
        "except PullError as err:\n"
        "    print(err)\n"
        "    sys.exit(3)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-home")}
    proc = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "models")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 3, proc.stderr
    assert "Qwen3-4B-Q4_K_M.gguf from the Hugging Face Hub (repo Qwen/Qwen3-4B-GGUF)" in proc.stdout
    assert "offline mode is on" in proc.stdout
    assert str(tmp_path / "models" / "Qwen3-4B-Q4_K_M.gguf") in proc.stdout
    assert "Traceback" not in proc.stderr
