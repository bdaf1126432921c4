"""Question/answer rows from local JSONL, JSON, CSV or parquet files, every cell as written.

The column mapping is configuration, so GSM8K- or MATH-shaped files load
without conversion. Cells are read as the text in the file (``lightning_rlvr.tasks.files``:
``007`` stays ``007``, ``4`` stays ``4``, ``None`` stays a string). Every row is checked
when the task is built: a row with a missing or empty answer is an error that names the
file, the row and the field, before any training starts.

The exact-match verifier compares the completion's answer (the shared ``AnswerParser``:
``rewards/answers.py``; its ``last`` fallback keeps the whole list the last number ends:
``2, 3, 5`` is not the answer ``5``) with the reference, ignoring case, spaces, a trailing
period and thousands separators; a comma between other numbers is kept, so ``1, 5`` never
equals ``15``. Unless configured, the parser reads numbers when every reference answer is one,
and short texts otherwise.
"""

from __future__ import annotations

import re

from ..core.errors import RLVRError
from ..core.problem import Problem, Verdict
from ..rewards.answers import SIGNED_NUMBER, AnswerParser
from ..rewards.math import drop_thousands_separators, trailing_list
from .base import Task
from .files import read_rows


def normalise_answer(text: str) -> str:
    """Strip case, a trailing period, ``####``-style prefixes, thousands separators, and spaces
    except between two digits (``1 5`` and ``1, 5`` stay apart from ``15``)."""
    text = drop_thousands_separators(text.strip().split("####")[-1].strip().rstrip("."))
    text = re.sub(r"\s+", " ", text)
    return re.sub(r"(?<!\d) | (?!\d)", "", text).lower()


def load_rows(path: str, fields: list[str]) -> list[dict]:
    """Rows of a local file (cells as written) with the given fields, each present and non-empty."""
    rows = read_rows(path)
    columns = list(dict.fromkeys(k for row in rows for k in row))
    missing = [f for f in fields if f not in columns]
    if missing:
        raise RLVRError(f"{path}: no column {missing[0]!r} in any row (columns: {columns})")
    check_rows(path, rows, fields)
    return rows


def check_rows(path: str, rows: list[dict], fields: list[str], value=lambda field, cell: cell) -> None:
    """Raise an error naming ``path`` and the row when a field is missing or empty.

    ``value(field, cell)`` maps a cell to what must be non-empty (e.g. the final answer inside
    a worked solution).
    """
    for i, row in enumerate(rows):
        for f in fields:
            cell = row.get(f)
            if cell is None or str(cell).strip() == "" or str(value(f, cell)).strip() == "":
                raise RLVRError(f"{path}: row {i} has no {f!r} (missing or empty)")


class JsonlTask(Task):
    """Question/answer pairs from local files, one file per split, answers checked by exact match.

    Args:
        train_file: training rows.
        test_file: held-out rows (``val`` uses the first ``val_size`` of them unless ``val_file`` is set).
        val_file: optional separate validation rows.
        question_field: column holding the prompt.
        answer_field: column holding the reference answer.
        solution_field: optional column with a worked solution (used by the warm start).
        template: how a question becomes a prompt; ``{question}`` is replaced.
        answers: how a completion's answer is read (None: ``kind: number`` when every reference
            answer is a number, else ``text``).
    """

    def __init__(
        self,
        train_file: str,
        test_file: str,
        val_file: str | None = None,
        question_field: str = "question",
        answer_field: str = "answer",
        solution_field: str | None = None,
        template: str = "{question}",
        answers: AnswerParser | None = None,
    ) -> None:
        self.fields = {"question": question_field, "answer": answer_field, "solution": solution_field}
        self.template = template
        needed = [question_field, answer_field] + ([solution_field] if solution_field else [])
        self._rows = {
            "train": load_rows(train_file, needed),
            "test": load_rows(test_file, needed),
        }
        self._rows["val"] = load_rows(val_file, needed) if val_file else self._rows["test"]
        self.files = {"train": train_file, "test": test_file, "val": val_file or test_file}
        self.answers = answers or self.default_answers()

    def default_answers(self) -> AnswerParser:
        cells = [str(r[self.fields["answer"]]).strip() for rows in self._rows.values() for r in rows]
        numeric = all(SIGNED_NUMBER.fullmatch(c) for c in cells)
        return AnswerParser(kind="number" if numeric else "text")

    def answer(self, completion: str) -> str | None:
        """The answer ``check`` compares: the parser's (its ``last`` fallback: the list that number ends)."""
        found = self.answers.find(completion)
        if found is None:
            return None
        return (trailing_list(completion) or found[0]) if found[1] == "last" else found[0]

    def size(self, split: str) -> int | None:
        return len(self._rows[split])

    def problem(self, split: str, index: int) -> Problem:
        row = self._rows[split][index]
        sol = self.fields["solution"]
        return Problem(
            prompt=self.template.format(question=row[self.fields["question"]]),
            answer=str(row[self.fields["answer"]]),
            solution=str(row[sol]) if sol else None,
            meta={"row": index},
        )

    def check(self, completion: str, problem: Problem) -> Verdict:
        got = self.answer(completion)
        if got is None:
            return Verdict(0.0, "no answer found")
        ok = normalise_answer(got) == normalise_answer(problem.answer)
        feedback = "correct" if ok else f"wrong answer {got.strip()}"
        return Verdict(self.answers.reward(ok, completion), feedback, ok)

    def extract_answer(self, completion: str) -> str | None:
        """The answer ``check`` compares, normalised the same way (for ``test/maj@k``)."""
        got = self.answer(completion)
        return None if got is None else normalise_answer(got)
