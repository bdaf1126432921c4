"""Question/answer rows from local JSONL, JSON, CSV or parquet files, every cell as written.

The column mapping is configuration, so GSM8K- or MATH-shaped files load
without conversion. Cells are read as the text in the file (``lightning_rlvr.tasks.files``:
``007`` stays ``007``, ``4`` stays ``4``, ``None`` stays a string). Every row is checked
when the task is built: a row with a missing or empty answer is an error that names the
file, the row and the field, before any training starts. Only ``test_file`` is needed to
validate or test; ``fit`` without a ``train_file`` is one error line.

The verifier compares the completion's answer (the shared ``AnswerParser``:
``rewards/answers.py``; its ``last`` fallback keeps the whole list the last number ends:
``2, 3, 5`` is not the answer ``5``) with the reference. Unless configured, the parser reads
numbers when every reference answer is one, and short texts otherwise; a column that is mostly
numbers with some rows that are not is an error naming those rows (fix them, or choose the kind).
Numbers compare by value (``51 == 51.0 == 51.00``, ``1,000 == 1000``, ``-3 == \u22123``), and a
column that a ``number`` parser cannot read whole is an error naming its rows. Text compares
exactly, ignoring case, spaces, a trailing period and thousands separators; a comma between
other numbers is kept, so ``1, 5`` never equals ``15``.
"""

from __future__ import annotations

import re

from ..core.errors import RLVRError
from ..core.problem import Problem, Verdict
from ..rewards.answers import AnswerParser, canonical_number, number_value
from ..rewards.math import drop_thousands_separators, trailing_list
from .base import Task
from .files import read_rows


def normalise_answer(text: str) -> str:
    """Strip case, a trailing period, ``####``-style prefixes, markdown bold and ``$`` around the answer,
    thousands separators, and spaces except between two digits (``1 5`` and ``1, 5`` stay apart from
    ``15``)."""
    text = text.strip().split("####")[-1].strip().strip("*$").strip()
    text = drop_thousands_separators(text.rstrip(".").strip())
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


def _rows_named(rows: list[int]) -> str:
    shown = ", ".join(map(str, rows[:5]))
    return f"row {shown}" if len(rows) == 1 else f"rows {shown}" + (", ..." if len(rows) > 5 else "")


class JsonlTask(Task):
    """Question/answer pairs from local files, one file per split; numbers compared by value, text exactly.

    Args:
        train_file: training rows (needed by ``fit`` only).
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
        train_file: str | None = None,
        test_file: str | None = None,
        val_file: str | None = None,
        question_field: str = "question",
        answer_field: str = "answer",
        solution_field: str | None = None,
        template: str = "{question}",
        answers: AnswerParser | None = None,
    ) -> None:
        if not test_file:
            raise RLVRError(
                f"{type(self).__name__} needs test_file (held-out rows for val and test); "
                "set model.task.init_args.test_file"
            )
        self.fields = {"question": question_field, "answer": answer_field, "solution": solution_field}
        self.template = template
        needed = [question_field, answer_field] + ([solution_field] if solution_field else [])
        self._rows = {
            "train": load_rows(train_file, needed) if train_file else [],
            "test": load_rows(test_file, needed),
        }
        self._rows["val"] = load_rows(val_file, needed) if val_file else self._rows["test"]
        self.files = {"train": train_file, "test": test_file, "val": val_file or test_file}
        self.answers = answers or self.default_answers()
        if self.answers.kind == "number":
            self.check_numbers()

    def references(self) -> dict[str, list[str]]:
        """Each split file's reference answers (the text after a ``####``), by file."""
        out: dict[str, list[str]] = {}
        for split, rows in self._rows.items():
            if self.files[split] is not None:
                cells = [str(r[self.fields["answer"]]).split("####")[-1].strip() for r in rows]
                out.setdefault(self.files[split], cells)
        return out

    def _not_numbers(self) -> tuple[dict[str, list[int]], int, int]:
        """Rows whose reference is not one number, by file; and how many references there are, and numbers."""
        bad = {
            f: [i for i, c in enumerate(cells) if number_value(c) is None]
            for f, cells in self.references().items()
        }
        total = sum(len(cells) for cells in self.references().values())
        return {f: rows for f, rows in bad.items() if rows}, total, total - sum(map(len, bad.values()))

    def _numbers_error(self, bad: dict[str, list[int]], total: int, numbers: int, why: str) -> RLVRError:
        where = "; ".join(f"{f} {_rows_named(rows)}" for f, rows in bad.items())
        field = self.fields["answer"]
        return RLVRError(
            f"{total - numbers} of {total} answers in column {field!r} are not numbers ({where}){why}; "
            "fix those rows, or set model.task.init_args.answers.kind to text"
        )

    def check_numbers(self) -> None:
        """One error line naming the rows whose reference a ``number`` parser can never match."""
        bad, total, numbers = self._not_numbers()
        if bad:
            raise self._numbers_error(bad, total, numbers, " but answers.kind is number")

    def default_answers(self) -> AnswerParser:
        """``kind: number`` when every reference is a number, ``text`` when few are; a column mostly of
        numbers with some rows that are not is an error naming them (which kind is meant is unclear)."""
        bad, total, numbers = self._not_numbers()
        if bad and numbers > total / 2:
            raise self._numbers_error(bad, total, numbers, f" while the other {numbers} are")
        return AnswerParser(kind="text" if bad else "number")

    def answer(self, completion: str) -> str | None:
        """The answer ``check`` compares: the parser's (its ``last`` fallback: the list that number ends)."""
        found = self.answers.find(completion)
        if found is None:
            return None
        if found[1] != "last":
            return found[0]
        return trailing_list(completion, at=self.answers.start(completion)) or found[0]

    def _split(self, split: str) -> list[dict]:
        if self.files[split] is None:
            raise RLVRError(
                f"{type(self).__name__} has no {split}_file: fit needs one "
                f"(set model.task.init_args.{split}_file); validate and test need only test_file"
            )
        return self._rows[split]

    def size(self, split: str) -> int | None:
        return len(self._split(split))

    def problem(self, split: str, index: int) -> Problem:
        row = self._split(split)[index]
        sol = self.fields["solution"]
        return Problem(
            prompt=self.template.format(question=row[self.fields["question"]]),
            answer=str(row[self.fields["answer"]]),
            solution=str(row[sol]) if sol else None,
            meta={"row": index},
        )

    def same(self, got: str, reference: str) -> bool:
        """Whether an answer equals a reference: by value for numbers, as normalised text otherwise."""
        if self.answers.kind == "number":
            value = number_value(got)
            return value is not None and value == number_value(reference.split("####")[-1])
        return normalise_answer(got) == normalise_answer(reference)

    def check(self, completion: str, problem: Problem) -> Verdict:
        got = self.answer(completion)
        if got is None:
            return Verdict(0.0, "no answer found")
        ok = self.same(got, problem.answer)
        feedback = "correct" if ok else f"wrong answer {got.strip()}"
        return Verdict(self.answers.reward(ok, completion), feedback, ok)

    def extract_answer(self, completion: str) -> str | None:
        """The answer ``check`` compares, normalised the same way (for ``test/maj@k``)."""
        got = self.answer(completion)
        if got is None:
            return None
        number = self.answers.kind == "number" and number_value(got) is not None
        return canonical_number(got) if number else normalise_answer(got)
