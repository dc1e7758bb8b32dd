"""The multi-call benchmark's grading: a "which of these" answer is right only if it names the right candidate
before any other (an answer that leads with a wrong one, or names none of them right, is wrong)."""

from __future__ import annotations

import pytest

from benchmarks.multi_call import QUESTIONS, Question, regraded

VOYAGER = next(question for question in QUESTIONS if question.name == "voyager-first")
EARLIEST = next(question for question in QUESTIONS if question.name == "earliest-of-three")


@pytest.mark.parametrize(
    ("question", "answer", "correct"),
    [
        (VOYAGER, "Voyager 2, launched on 20 August 1977, before Voyager 1.", True),
        (VOYAGER, "Voyager 1 was launched on 5 September 1977, while Voyager 2 was launched later.", False),
        (VOYAGER, "Voyager 1, 5 September 1977 against 20 August 1977.", False),
        (EARLIEST, "The Apollo 11 Moon landing, 1969, before Voyager 1 and Hubble.", True),
        (EARLIEST, "The Voyager 1 launch occurred first, followed by the Apollo 11 landing.", False),
        (EARLIEST, None, False),
    ],
)
def test_a_which_answer_is_right_only_when_it_names_the_right_candidate_first(
    question: Question, answer: str | None, correct: bool
) -> None:
    assert question.graded(answer) is correct


def test_a_question_without_other_candidates_needs_only_its_pattern() -> None:
    years = next(question for question in QUESTIONS if question.name == "apollo-hubble-years")
    assert years.others == ()
    assert years.graded("Twenty-one years: 1969 to 1990.")
    assert not years.graded("Twenty years.")


def test_regrading_a_results_file_recounts_each_setting_from_the_answers_given() -> None:
    case = {
        "case": "voyager-first",
        "rounds": 2,
        "seconds": 1.0,
        "calls_per_round": [1, 0],
        "all_retrieved": True,
        "answered": True,
        "cited": ["space-01", "space-02"],
        "cites_all": True,
    }
    report = {
        "model": "0.5b",
        "settings": [
            {
                "max_calls_per_step": 1,
                "correct": 2,
                "cases": [
                    case | {"answer": "Voyager 1, before Voyager 2.", "correct": True},
                    case | {"answer": "Voyager 2 launched first.", "correct": True},
                ],
            }
        ],
    }
    (setting,) = regraded(report)["settings"]
    assert setting["correct"] == 1
    assert [run["correct"] for run in setting["cases"]] == [False, True]
    assert setting["runs"] == 2
    assert setting["all_retrieved"] == 2
