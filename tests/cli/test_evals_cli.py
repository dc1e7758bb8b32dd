"""``agentkit eval run`` over a real HTTP server (the fake OpenAI-compatible one) and ``agentkit eval compare`` as a
gate: exit 0 without a regression, 1 with one, 2 when the reports cannot be compared."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentkit._cli import main
from agentkit.evals import EvalReport
from agentkit.testing import FakeOpenAIServer
from tests.cli.support import cli, dataset_file, replies


def evaluate_on(server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str], dataset: Path, out: Path) -> str:
    code, stdout, err = cli(
        capsys,
        "eval",
        "run",
        str(dataset),
        "--agent",
        "agentkit.evals.demo:researcher",
        "--base-url",
        server.base_url,
        "--model",
        "fake-model",
        "--out",
        str(out),
    )
    assert code == 0, err
    return stdout


def test_eval_run_evaluates_a_dataset_file_over_a_server_prints_the_table_and_writes_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeOpenAIServer(replies()) as server:
        out = evaluate_on(server, capsys, dataset_file(tmp_path), tmp_path / "base.json")
        server.assert_complete()
    report = EvalReport.load(tmp_path / "base.json")
    assert (report.dataset, report.label, report.passed) == ("two-questions", "fake-model", True)
    assert [c.name for c in report.cases] == ["voyager", "mercury"]
    assert out.splitlines()[0] == "dataset two-questions · 2 cases x 1 repeat(s) · fake-model"
    assert "passed 2/2 runs (100%)" in out
    assert f"report written to {tmp_path / 'base.json'}" in out


def test_eval_compare_exits_0_without_a_regression_and_1_naming_the_case_that_now_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dataset = dataset_file(tmp_path)
    with FakeOpenAIServer(replies()) as server:
        evaluate_on(server, capsys, dataset, tmp_path / "base.json")
    with FakeOpenAIServer(replies()) as server:
        evaluate_on(server, capsys, dataset, tmp_path / "same.json")
    with FakeOpenAIServer(replies(voyager_says="It was launched long ago.")) as server:  # no year: a wrong answer
        evaluate_on(server, capsys, dataset, tmp_path / "new.json")
    code, out, _ = cli(capsys, "eval", "compare", str(tmp_path / "base.json"), str(tmp_path / "same.json"))
    assert (code, out.splitlines()[-1]) == (0, "no regressions")
    code, out, _ = cli(capsys, "eval", "compare", str(tmp_path / "base.json"), str(tmp_path / "new.json"))
    assert code == 1
    assert "case_fails [voyager]: 100% -> 0%; failed: answer.answer ~ /1977/" in out


def test_eval_compare_of_reports_from_other_datasets_or_not_reports_exits_2_saying_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeOpenAIServer(replies()) as server:
        evaluate_on(server, capsys, dataset_file(tmp_path), tmp_path / "base.json")
    with FakeOpenAIServer(replies()) as server:
        evaluate_on(server, capsys, dataset_file(tmp_path, "renamed"), tmp_path / "other.json")
    code, _, err = cli(capsys, "eval", "compare", str(tmp_path / "base.json"), str(tmp_path / "other.json"))
    assert code == 2
    assert "different datasets: 'two-questions' and 'renamed'" in err
    (tmp_path / "junk.json").write_text("{}")
    code, _, err = cli(capsys, "eval", "compare", str(tmp_path / "base.json"), str(tmp_path / "junk.json"))
    assert code == 2
    assert "is not an agentkit eval report" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--base-url", "http://127.0.0.1:9/v1"], "--base-url needs --model"),
        (["--local", "--model", "m"], "--local needs neither"),
        ([], "one of the arguments --base-url --local is required"),
    ],
)
def test_eval_run_refuses_a_server_without_its_model_before_any_request(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["eval", "run", str(dataset_file(tmp_path)), "--agent", "agentkit.evals.demo:researcher", *argv])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("dataset", "agent", "message"),
    [
        ("agentkit.evals.demo:NOPE", "agentkit.evals.demo:researcher", "module 'agentkit.evals.demo' has no 'NOPE'"),
        ("agentkit.evals.demo:researcher", "agentkit.evals.demo:researcher", "is a function, not a Dataset"),
        ("agentkit.evals.demo:QUESTIONS", "agentkit.evals.demo", "give MODULE:ATTR"),
        ("agentkit.evals.demo:QUESTIONS", "agentkit.evals.demo:QUESTIONS", "is not a function"),
    ],
)
def test_eval_run_names_a_wrong_dataset_or_agent_and_exits_2(
    dataset: str, agent: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = cli(
        capsys, "eval", "run", dataset, "--agent", agent, "--base-url", "http://127.0.0.1:9/v1", "--model", "m"
    )
    assert code == 2
    assert message in err
