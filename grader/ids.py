"""Row ids as a request names them. Every id column is a 64-bit integer counted from 1, so a
number outside 1..2^63-1 names no row: it is answered 404 like an id that is not there, never
handed to the database (SQLite refuses to bind an integer past 2^63, a 500 before issue 54).
`RowId` types an id of a path, query or JSON body (its errors are `id_out_of_range`, which the
error handlers answer 404: grader/api/errors.py); `parse_row_id` reads one from a form's text."""
from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, WithJsonSchema
from pydantic_core import PydanticCustomError

MAX_ROW_ID = 2**63 - 1
ID_OUT_OF_RANGE = "id_out_of_range"  # the validation error's type


def _in_range(value: object) -> object:
    """`value` (the request's text, or a JSON number) unless it is an integer outside 1..MAX_ROW_ID;
    what is no integer at all is left to the integer's own validation."""
    if isinstance(value, str):
        digits = value.strip().removeprefix("-").removeprefix("+")
        if not (digits.isascii() and digits.isdigit()):
            return value
        number = int(value) if len(digits) <= len(str(MAX_ROW_ID)) else None  # past 19 digits: out of range
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        return value
    if number is None or not 0 < number <= MAX_ROW_ID:
        shown = str(value).strip()
        raise PydanticCustomError(ID_OUT_OF_RANGE, "{value} is not an id: ids run from 1 to 2^63-1",
                                  {"value": shown if len(shown) <= 24 else shown[:20] + "…"})
    return value


RowId = Annotated[int, BeforeValidator(_in_range), WithJsonSchema({"type": "integer", "minimum": 1})]


def parse_row_id(text: str) -> int | None:
    """The id `text` names (ASCII digits, 1..MAX_ROW_ID); None for anything else."""
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(MAX_ROW_ID)):
        return None
    value = int(text)
    return value if 0 < value <= MAX_ROW_ID else None
