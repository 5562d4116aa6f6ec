"""The real `alcheck serve` command line: it prints the listening line, answers, and exits 0 on
SIGINT / SIGTERM; bad input exits 2 in one line before any weight loads."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest
from click.testing import CliRunner

from alcheck.cli.main import cli
from alcheck.methods.table import proposer_for
from alcheck.runner.config import RunnerConfig
from alcheck.runner.paged import PagedRunner

LINE = "alcheck serve: listening on http://127.0.0.1:"


def start(pair_dirs, dialect: str, k: int):
    cmd = [
        sys.executable,
        "-m",
        "alcheck",
        "serve",
        "--target",
        str(pair_dirs[0]),
        "--draft",
        str(pair_dirs[1]),
        "--k",
        str(k),
        "--dialect",
        dialect,
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--dtype",
        "float32",
        "--device",
        "cpu",
        "--model-name",
        "tiny",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()  # the server prints exactly this line once it accepts connections
    if not line.startswith(LINE):
        proc.kill()
        raise AssertionError(f"no listening line: {line!r}; stderr: {proc.stderr.read()[-2000:]}")
    return proc, line.split(" on ")[1].strip()


def stop(proc, sig) -> tuple[int, str, str]:
    proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return proc.returncode, out, err


def oracle(pair, prompt, k, max_tokens):
    target, head = pair
    runner = PagedRunner(
        target.model, proposer_for(head), target.eos_token_ids, RunnerConfig(num_spec_tokens=k)
    )
    return runner.generate([prompt], max_tokens)[0]


def test_cli_serves_and_stops_on_sigint(pair_dirs, pair, prompts):
    # one subprocess (the startup costs seconds); the sglang dialect and SIGTERM are tested in-process
    dialect, sig, k, max_tokens = "vllm", signal.SIGINT, 2, 30
    proc, url = start(pair_dirs, dialect, k)
    try:
        with httpx.Client(base_url=url, timeout=60) as client:
            assert client.get("/health").status_code == 200
            want = oracle(pair, prompts[2], k, max_tokens)
            assert client.get("/v1/models").json()["data"][0]["id"] == "tiny"
            body = client.post(
                "/v1/completions",
                json={
                    "model": "tiny",
                    "prompt": prompts[2],
                    "max_tokens": max_tokens,
                    "temperature": 0,
                    "return_token_ids": True,
                },
            ).json()
            spec = body["metrics"]["speculative_decoding"]
            assert body["choices"][0]["token_ids"] == want.output_ids
            assert (spec["num_spec_steps"], spec["num_accepted_draft_tokens"]) == (want.steps, want.accepted)
            assert "vllm:spec_decode_num_drafts_total" in client.get("/metrics").text
    finally:
        started = time.monotonic()
        code, out, err = stop(proc, sig)
    assert code == 0, err[-2000:]
    assert time.monotonic() - started < 15
    assert "Traceback" not in err and out == ""  # the listening line was the only stdout


def test_serve_forever_returns_on_sigterm(pair, prompts, capsys):
    """The CLI's serving loop in this process's main thread: SIGTERM ends it normally (exit 0 in the
    CLI), and the process's own SIGTERM handler is back afterwards."""
    import threading

    from alcheck.serve.app import create_app
    from alcheck.serve.config import ServeConfig
    from alcheck.serve.listen import bind, serve_forever
    from alcheck.serve.pair import ServedPair

    target, head = pair
    engine = ServedPair(target, proposer_for(head), "eagle", 2, 2048, "cpu", "float32")
    app = create_app(engine, ServeConfig(target="t", draft="d", k=2, dialect="sglang", port=0))
    sock = bind("127.0.0.1", 0)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    seen = {}

    def client():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                seen["meta"] = httpx.post(
                    f"{url}/generate",
                    json={
                        "input_ids": prompts[3],
                        "sampling_params": {"max_new_tokens": 8, "temperature": 0},
                    },
                    timeout=30,
                ).json()["meta_info"]
                break
            except httpx.TransportError:
                time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    before = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=client)
    thread.start()
    serve_forever(app, "127.0.0.1", sock)
    thread.join(30)
    assert signal.getsignal(signal.SIGTERM) == before
    assert capsys.readouterr().out == f"alcheck serve: listening on {url}\n"
    assert seen["meta"]["completion_tokens"] == 8 and seen["meta"]["spec_verify_ct"] > 0


def invoke(args) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["serve", *args])
    return result.exit_code, result.output.strip()


def test_bad_k_exits_2_before_loading(tmp_path):
    # the target does not exist: the --k error comes first, so nothing was looked up or loaded
    code, out = invoke(
        [
            "--target",
            str(tmp_path / "none"),
            "--draft",
            str(tmp_path / "none"),
            "--k",
            "0",
            "--dialect",
            "vllm",
        ]
    )
    assert code == 2 and len(out.splitlines()) == 1 and "--k 0" in out


def test_port_in_use_exits_2_before_loading(pair_dirs):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        code, out = invoke(
            [
                "--target",
                str(pair_dirs[0]),
                "--draft",
                str(pair_dirs[1]),
                "--k",
                "2",
                "--dialect",
                "sglang",
                "--port",
                str(port),
            ]
        )
    assert code == 2 and len(out.splitlines()) == 1 and f"--port {port}" in out
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--method", "eagle3"], "--method eagle3"),
        (["--device", "gpu0"], "--device gpu0"),
        (["--max-batch-size", "0"], "--max-batch-size 0"),
        (["--topk", "2", "--num-draft-tokens", "5"], "vLLM has no tree drafting"),
        (
            ["--num-draft-tokens", "5"],
            "--topk 1 is the chain, which verifies K+1 tokens: --num-draft-tokens 5 does not fit K=2",
        ),
    ],
)
def test_bad_options_exit_2_in_one_line(pair_dirs, extra, needle):
    code, out = invoke(
        [
            "--target",
            str(pair_dirs[0]),
            "--draft",
            str(pair_dirs[1]),
            "--k",
            "2",
            "--dialect",
            "vllm",
            "--port",
            "0",
            *extra,
        ]
    )
    assert code == 2 and len(out.splitlines()) == 1 and needle in out, out


def test_missing_draft_exits_2(pair_dirs, tmp_path):
    code, out = invoke(
        [
            "--target",
            str(pair_dirs[0]),
            "--draft",
            str(tmp_path / "nothing"),
            "--k",
            "2",
            "--dialect",
            "vllm",
            "--port",
            "0",
        ]
    )
    assert code == 2 and len(out.splitlines()) == 1 and "draft" in out, out


def test_no_per_request_metrics_is_a_vllm_option(pair_dirs):
    """SGLang always reports per-request counts: the flag would be silently ignored there (issue 24)."""
    code, out = invoke(
        [
            "--target",
            str(pair_dirs[0]),
            "--draft",
            str(pair_dirs[1]),
            "--k",
            "2",
            "--dialect",
            "sglang",
            "--port",
            "0",
            "--no-per-request-metrics",
        ]
    )
    assert (
        code == 2
        and len(out.splitlines()) == 1
        and "--no-per-request-metrics" in out
        and "--dialect vllm" in out
    ), out


def test_unbuildable_tree_exits_2(pair_dirs):
    code, out = invoke(
        [
            "--target",
            str(pair_dirs[0]),
            "--draft",
            str(pair_dirs[1]),
            "--k",
            "2",
            "--dialect",
            "sglang",
            "--port",
            "0",
            "--topk",
            "2",
        ]
    )
    assert code == 2 and len(out.splitlines()) == 1 and "--topk 2" in out, out


def test_bound_socket_disables_nagle():
    # asyncio sets TCP_NODELAY on accepted connections only for IPPROTO_TCP sockets; without it
    # each JSON response waited ~40 ms for the client's delayed ACK (measured with httpx)
    from alcheck.serve.listen import bind

    with bind("127.0.0.1", 0) as sock:
        assert sock.proto == socket.IPPROTO_TCP
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


def test_a_tree_with_sampled_drafts_exits_2(pair_dirs):
    """Any request may ask for temperature > 0, where a tree takes only the onehot rule: refused at start."""
    code, out = invoke(
        [
            "--target",
            str(pair_dirs[0]),
            "--draft",
            str(pair_dirs[1]),
            "--k",
            "2",
            "--dialect",
            "sglang",
            "--port",
            "0",
            "--topk",
            "2",
            "--num-draft-tokens",
            "5",
            "--draft-sampling",
            "sampled",
        ]
    )
    assert code == 2 and len(out.splitlines()) == 1 and "--draft-sampling onehot" in out, out


def test_serve_defaults_to_the_demo_pair_and_the_vllm_dialect():
    """Issue 50: `serve` without --target said "Missing option", then "Missing option --dialect",
    where `run` takes the embedded demo pair. Now serve takes the pair run takes, speaking vLLM's
    dialect, and gets as far as the port (taken here, so nothing loads)."""
    from alcheck import paths
    from alcheck.cli.serve import serve_pair
    from alcheck.methods.table import demo_head

    pair = serve_pair({"target": None, "draft": "", "method": "auto"})
    assert (pair["target"], pair["draft"]) == (str(paths.DEMO_TARGET_DIR), str(demo_head("auto")))
    ngram = serve_pair({"target": None, "draft": "", "method": "ngram"})
    assert (ngram["target"], ngram["draft"]) == (str(paths.DEMO_TARGET_DIR), "")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, out = invoke(["--k", "2", "--port", str(port)])
    assert code == 2 and len(out.splitlines()) == 1 and f"--port {port}" in out, out
    result = CliRunner().invoke(cli, ["serve", "--help"], env={"COLUMNS": "200"})
    assert "embedded demo pair" in result.output and "[default: vllm]" in result.output, result.output


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--draft", "some/head"], "--draft some/head without --target: pass the target it drafts for"),
        (["--method", "medusa"], "--method medusa: the embedded demo has no Medusa heads"),
    ],
)
def test_serve_without_a_target_refuses_what_run_refuses(args, needle):
    code, out = invoke(["--k", "2", "--port", "0", *args])
    assert code == 2 and len(out.splitlines()) == 1 and needle in out, out
