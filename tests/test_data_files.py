"""Data files: every cell loads as the text in the file; every bad file is one clear error line."""

from __future__ import annotations

import csv
import json

import pytest

from lightning_rlvr.core.errors import RLVRError
from lightning_rlvr.tasks import JsonlTask, MathTask
from lightning_rlvr.tasks.files import cell_text, read_rows

# (answer as written in a text file, the text the task must see)
TRICKY = [
    "007",
    "4",
    "None",
    "NA",
    "null",
    "N/A",
    "nan",
    "0.1",
    "1,000",
    "-0",
    "123456789012345678901234567890",
]


def answers(path) -> list:
    return [r["answer"] for r in read_rows(str(path))]


def test_csv_cells_are_the_text_in_the_file(tmp_path):
    f = tmp_path / "rows.csv"
    f.write_text("question,answer\n" + "".join(f'q{i},"{a}"\n' for i, a in enumerate(TRICKY)) + "q,\n")
    assert answers(f) == TRICKY + [""]
    unquoted = tmp_path / "plain.csv"
    unquoted.write_text("question,answer\nq,007\nq,NA\nq,4\nq,0.10\n")
    assert answers(unquoted) == ["007", "NA", "4", "0.10"]


def test_jsonl_strings_stay_as_written_and_numbers_keep_their_digits(tmp_path):
    f = tmp_path / "rows.jsonl"
    f.write_text("".join(json.dumps({"question": "q", "answer": a}) + "\n" for a in TRICKY))
    assert answers(f) == TRICKY
    numbers = tmp_path / "numbers.jsonl"
    written = ["4", "4.5", "0.1", "0.10", "1e3", "-0", "123456789012345678901234567890", "true"]
    numbers.write_text("".join(f'{{"question": "q", "answer": {a}}}\n' for a in written))
    assert answers(numbers) == written  # 4 stays 4 even next to 4.5; no 4.0, no 1000.0


def test_jsonl_lines_end_only_at_newlines(tmp_path):
    f = tmp_path / "rows.jsonl"
    answers_written = ["a\u2028b", "c\u2029d", "e\x0bf", "g\x85h", "i\r\nj"]
    f.write_bytes(
        "".join(
            json.dumps({"question": "q", "answer": a}, ensure_ascii=False) + "\r\n" for a in answers_written
        ).encode()
    )
    assert answers(f) == answers_written


def test_json_list_of_rows_and_json_columns(tmp_path):
    rows = tmp_path / "rows.json"
    rows.write_text(
        '[{"question": "q", "answer": 4}, {"question": "q", "answer": "007"}, '
        '{"question": "q", "answer": 0.1, "tests": [1, 2.5]}]'
    )
    loaded = read_rows(str(rows))
    assert [r["answer"] for r in loaded] == ["4", "007", "0.1"]
    assert loaded[2]["tests"] == [1, 2.5] and type(loaded[2]["tests"][0]) is int  # nested values keep types
    columns = tmp_path / "columns.json"
    columns.write_text('{"question": ["a", "b"], "answer": [4, "None"]}')
    assert answers(columns) == ["4", "None"]
    lines = tmp_path / "lines.json"  # JSON lines in a .json file
    lines.write_text('{"question": "a", "answer": 4}\n{"question": "b", "answer": "NA"}\n')
    assert answers(lines) == ["4", "NA"]


def test_parquet_cells_as_stored_and_numbers_as_plain_text(tmp_path):
    from datasets import Dataset

    f = tmp_path / "rows.parquet"
    Dataset.from_dict(
        {
            "question": ["q"] * 5,
            "answer": ["007", "None", "NA", "", "4"],
            "ints": [4, 7, 2**62, -3, None],
            "floats": [0.1, 4.0, 2.5, 1e-7, None],
        }
    ).to_parquet(str(f))
    rows = read_rows(str(f))
    assert [r["answer"] for r in rows] == ["007", "None", "NA", "", "4"]
    assert [r["ints"] for r in rows] == ["4", "7", str(2**62), "-3", None]
    assert [r["floats"] for r in rows] == ["0.1", "4", "2.5", "1e-07", None]


@pytest.mark.parametrize(
    "value, text",
    [
        (4, "4"),
        (4.0, "4"),
        (0.1, "0.1"),
        (0.1 + 0.2, "0.30000000000000004"),
        (float("nan"), None),
        (True, "true"),
        (False, "false"),
        (None, None),
        ("007", "007"),
        (2**70, str(2**70)),
        (-2.5, "-2.5"),
    ],
)
def test_cell_text(value, text):
    assert cell_text(value) == text


@pytest.mark.parametrize("ext", ["csv", "jsonl", "json", "parquet"])
def test_tasks_score_answers_that_a_dataframe_would_have_changed(tmp_path, ext):
    rows = [
        {"question": "Pad 7 to three digits.", "answer": "007"},
        {"question": "Python's null?", "answer": "None"},
        {"question": "Not applicable, abbreviated?", "answer": "NA"},
    ]
    f = tmp_path / f"rows.{ext}"
    if ext == "csv":
        with f.open("w", newline="") as out:
            csv.writer(out).writerows([["question", "answer"]] + [[r["question"], r["answer"]] for r in rows])
    elif ext == "jsonl":
        f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif ext == "json":
        f.write_text(json.dumps(rows))
    else:
        from datasets import Dataset

        Dataset.from_list(rows).to_parquet(str(f))
    task = JsonlTask(str(f), str(f))
    for i, expected in enumerate(["007", "None", "NA"]):
        p = task.problem("train", i)
        assert p.answer == expected
        assert task.check(f"answer: {expected}", p).reward == 1.0
    assert task.check("answer: 7", task.problem("train", 0)).reward == 0.0


def test_math_task_keeps_integer_answers_from_json(tmp_path):
    f = tmp_path / "rows.jsonl"
    f.write_text('{"question": "2+2?", "answer": 4}\n{"question": "half?", "answer": 0.5}\n')
    task = MathTask(str(f), str(f))
    assert [task.problem("test", i).answer for i in range(2)] == ["4", "0.5"]
    assert task.check("\\boxed{4}", task.problem("test", 0)).reward == 1.0


def _error(path) -> str:
    with pytest.raises(RLVRError) as info:
        JsonlTask(str(path), str(path))
    message = str(info.value)
    assert "\n" not in message and message.strip() == message
    assert path.name in message
    return message


@pytest.mark.parametrize("ext", ["jsonl", "json", "csv"])
def test_non_utf8_file(tmp_path, ext):
    f = tmp_path / f"latin1.{ext}"
    content = {
        "jsonl": '{"question": "ok", "answer": "1"}\n{"question": "café", "answer": "2"}\n',
        "json": '[{"question": "ok", "answer": "1"},\n {"question": "café", "answer": "2"}]',
        "csv": "question,answer\nok,1\ncafé,2\n",
    }[ext]
    f.write_bytes(content.encode("latin-1"))
    message = _error(f)
    line = 3 if ext == "csv" else 2
    assert "not UTF-8" in message and f"byte 0xe9 on line {line}" in message


@pytest.mark.parametrize("ext", ["jsonl", "json", "csv"])
@pytest.mark.parametrize("content, says", [("", "is empty"), ("  \n\n\t \n", "only whitespace")])
def test_empty_and_whitespace_only_files(tmp_path, ext, content, says):
    f = tmp_path / f"empty.{ext}"
    f.write_text(content)
    message = _error(f)
    assert says in message and "no rows" in message


@pytest.mark.parametrize(
    "content, says",
    [("[]", "no rows"), ("question,answer\n", "no rows"), ('{"question": "q", "answer": "1"}\n\n', None)],
)
def test_files_without_rows(tmp_path, content, says):
    f = tmp_path / ("rows.csv" if content.startswith("question") else "rows.json")
    f.write_text(content)
    if says is None:
        assert len(read_rows(str(f))) == 1
    else:
        assert says in _error(f)


@pytest.mark.parametrize(
    "lines, line_no",
    [
        (['{"question": "q", "answer": "1"}', '{"question": "q", "ans'], 2),
        (['{"question": "q", "answer": "1"}', "", '{"question": "q" "answer": "2"}'], 3),
        (['{"question": "q", "answer": 1,}'], 1),
        (["{'question': 'q'}"], 1),
    ],
)
def test_broken_json_line_names_the_line(tmp_path, lines, line_no):
    f = tmp_path / "broken.jsonl"
    f.write_text("\n".join(lines) + "\n")
    assert f"line {line_no} is not valid JSON" in _error(f)


def test_broken_json_file_names_line_and_column(tmp_path):
    f = tmp_path / "broken.json"
    f.write_text('[\n  {"question": "q", "answer": "1"},\n  {"question": "q", "answer": \n')
    assert "not valid JSON at line 4" in _error(f)


@pytest.mark.parametrize("ext", ["jsonl", "json", "csv", "parquet"])
@pytest.mark.parametrize(
    "bad", [{"question": "q"}, {"question": "q", "answer": ""}, {"question": "q", "answer": None}]
)
def test_row_without_answer_names_field_and_row(tmp_path, ext, bad):
    rows = [{"question": "ok", "answer": "1"}, {"question": "ok", "answer": "2"}, bad]
    f = tmp_path / f"rows.{ext}"
    if ext == "jsonl":
        f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif ext == "json":
        f.write_text(json.dumps(rows))
    elif ext == "csv":
        f.write_text("question,answer\nok,1\nok,2\n" + ("q\n" if "answer" not in bad else "q,\n"))
    else:
        from datasets import Dataset

        Dataset.from_dict(
            {"question": ["ok", "ok", "q"], "answer": ["1", "2", bad.get("answer")]}
        ).to_parquet(str(f))
    assert "row 2 has no 'answer'" in _error(f)


def test_column_absent_from_every_row(tmp_path):
    f = tmp_path / "rows.jsonl"
    f.write_text('{"question": "q", "solution": "1"}\n')
    assert "no column 'answer'" in _error(f)


@pytest.mark.parametrize(
    "name, content, says",
    [
        ("rows.json", '"just a string"', "top level is a JSON string"),
        ("rows.json", "42", "top level is a JSON number"),
        ("rows.json", '{"data": [{"question": "q", "answer": "1"}], "version": 1}', "no column 'question'"),
        ("rows.json", "[1, 2]", "row 0 is a JSON number"),
        ("rows.json", "null", "top level is a JSON null"),
        ("rows.json", '[{"question": "q", "answer": "1"}, ["q", "2"]]', "row 1 is a JSON array"),
        ("rows.jsonl", '{"question": "q", "answer": "1"}\n["q", "2"]\n', "line 2 is a JSON array"),
        ("rows.jsonl", '"q"\n', "line 1 is a JSON string"),
        ("rows.jsonl", "3\n", "line 1 is a JSON number"),
    ],
)
def test_wrong_top_level_type(tmp_path, name, content, says):
    f = tmp_path / name
    f.write_text(content)
    assert says in _error(f)


def test_csv_row_with_too_many_cells(tmp_path):
    f = tmp_path / "rows.csv"
    f.write_text("question,answer\nq,1\nq,2,3\n")
    assert "row 1 has 3 cells but the header has 2" in _error(f)


def test_missing_file_directory_extension_and_corrupt_parquet(tmp_path):
    with pytest.raises(RLVRError, match=r"data file not found: .*nope\.jsonl$"):
        read_rows(str(tmp_path / "nope.jsonl"))
    (tmp_path / "dir.jsonl").mkdir()
    assert "is a directory" in _error(tmp_path / "dir.jsonl")
    assert "is a directory" in _error(tmp_path)
    (tmp_path / "rows.txt").write_text("q,a\n")
    assert "unsupported extension '.txt'" in _error(tmp_path / "rows.txt")
    (tmp_path / "bad.parquet").write_bytes(b"not a parquet file at all")
    assert "could not be read as parquet" in _error(tmp_path / "bad.parquet")
