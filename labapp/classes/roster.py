"""CSV rosters: read and check every row first (the preview), then create the good rows at once.

A roster has a header row naming its columns: ``username`` and ``email`` are required,
``role`` (learner or instructor, empty = learner) and ``password`` (empty = generated)
are optional. A roster only creates new accounts: adding an existing account to a class
would let its instructor read that person's runs from another class, so a taken
username is an error; its owner can join with the class's code themselves.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.contrib.auth.models import AbstractBaseUser, User
from django.contrib.auth.password_validation import validate_password
from django.core import signing
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.db.models.functions import Lower
from django.utils.translation import gettext as _

from labapp.classes import services
from labapp.models import Classroom, Membership, TemporaryPassword

MAX_BYTES = 256 * 1024
MAX_ROWS = 1000
CONFIRM_MAX_AGE_S = 3600  # a preview left open longer is uploaded again
COLUMNS = ("username", "email", "role", "password")
REQUIRED = ("username", "email")


class RosterFileError(ValueError):
    """The file as a whole cannot be read (nothing is previewed or created)."""


@dataclass
class RosterRow:
    line: int
    username: str
    email: str
    role: str
    password: str = field(repr=False, default="")
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


@dataclass(frozen=True)
class Created:
    user: User
    role: str
    password: str  # the generated one, shown once; empty when the roster chose it


def _decode(data: bytes) -> str:
    if len(data) > MAX_BYTES:
        raise RosterFileError(_("파일이 너무 큽니다 (최대 %(n)d KB).") % {"n": MAX_BYTES // 1024})
    try:
        text = data.decode("utf-8-sig")  # a spreadsheet's UTF-8 export starts with a BOM
    except UnicodeDecodeError:
        raise RosterFileError(_("UTF-8 CSV 파일이 아닙니다. 스프레드시트에서 'CSV UTF-8'로 저장하세요.")) from None
    if "\x00" in text:
        raise RosterFileError(_("CSV 파일이 아닙니다 (이진 데이터가 들어 있습니다)."))
    if not text.strip():
        raise RosterFileError(_("파일이 비어 있습니다."))
    return text


def _header(cells: list[str]) -> list[str]:
    names = [c.strip().lower() for c in cells]
    unknown = [n for n in names if n not in COLUMNS]
    missing = [n for n in REQUIRED if n not in names]
    if missing or unknown or len(set(names)) != len(names):
        raise RosterFileError(
            _("첫 줄은 열 이름이어야 합니다: username,email[,role][,password] (지금: %(found)s).")
            % {"found": ",".join(cells)[:200]}
        )
    return names


def roster_read(data: bytes, classroom: Classroom) -> list[RosterRow]:
    """Every data row with its errors; RosterFileError when the file itself is unreadable."""
    text = _decode(data)
    try:
        records = list(csv.reader(io.StringIO(text, newline=""), strict=True))
    except csv.Error as exc:
        raise RosterFileError(_("CSV 형식이 잘못되었습니다: %(error)s") % {"error": exc}) from None
    records = [r for r in records if any(cell.strip() for cell in r)]
    if not records:
        raise RosterFileError(_("파일이 비어 있습니다."))
    names = _header(records[0])
    if len(records) - 1 > MAX_ROWS:
        raise RosterFileError(_("한 번에 %(n)d명까지 가져올 수 있습니다.") % {"n": MAX_ROWS})
    if len(records) == 1:
        raise RosterFileError(_("열 이름 아래에 사람이 한 명도 없습니다."))
    rows = []
    for line, cells in enumerate(records[1:], start=2):
        values = dict(zip(names, (c.strip() for c in cells), strict=False))
        row = RosterRow(
            line=line,
            username=values.get("username", ""),
            email=values.get("email", ""),
            role=values.get("role", "").lower() or Membership.Role.LEARNER,
            password=values.get("password", ""),
        )
        if len(cells) != len(names):
            row.errors.append(_("열이 %(n)d개여야 하는데 %(m)d개입니다.") % {"n": len(names), "m": len(cells)})
        rows.append(row)
    _check(rows, classroom)
    return rows


def _check(rows: list[RosterRow], classroom: Classroom) -> None:
    wanted = {r.username.lower() for r in rows if r.username}
    taken = {name.lower(): in_class for name, in_class in _existing(wanted, classroom)}
    first_line: dict[str, int] = {}
    for row in rows:
        key = row.username.lower()
        if not row.username:
            row.errors.append(_("username이 비어 있습니다."))
        else:
            try:
                User.username_validator(row.username)
                if len(row.username) > 150:
                    raise ValidationError("too long")
            except ValidationError:
                row.errors.append(_("username에는 150자 이내의 글자, 숫자, @ . + - _ 만 쓸 수 있습니다."))
            if key in first_line:
                row.errors.append(_("파일 안에서 중복입니다 (%(line)d행과 같음).") % {"line": first_line[key]})
            else:
                first_line[key] = row.line
            if key in taken:
                row.errors.append(
                    _("이미 이 수업에 있습니다.") if taken[key] else _("이미 다른 계정이 쓰는 username입니다.")
                )
        if row.email:
            try:
                validate_email(row.email)
            except ValidationError:
                row.errors.append(_("이메일 주소 형식이 아닙니다."))
        if row.role not in Membership.Role.values:
            message = _("role은 learner 또는 instructor여야 합니다 (지금: %(role)s).")
            row.errors.append(message % {"role": row.role[:40]})
        if row.password and row.username:
            try:
                validate_password(row.password, User(username=row.username, email=row.email))
            except ValidationError as exc:
                row.errors.append(_("비밀번호: %(why)s") % {"why": " ".join(exc.messages)})


def _existing(names: Iterable[str], classroom: Classroom) -> list[tuple[str, bool]]:
    """(username, already in this class) of the accounts that already use these names, in two queries."""
    lowered = list(names)
    if not lowered:
        return []
    users = list(
        User.objects.annotate(lowered=Lower("username")).filter(lowered__in=lowered).values_list("pk", "username")
    )
    members = set(
        Membership.objects.filter(classroom=classroom, user_id__in=[pk for pk, _name in users]).values_list(
            "user_id", flat=True
        )
    )
    return [(username, pk in members) for pk, username in users]


def roster_sign(text: str, *, classroom: Classroom, by: AbstractBaseUser, nonce: str) -> str:
    """The previewed file as a signed value for the confirm form (``roster_unsign`` reads it back).

    The file's passwords thus travel only in the instructor's own page, never stored on
    the server; ``nonce`` (in the instructor's session) makes each preview confirmable once.
    """
    return signing.dumps({"csv": text, "nonce": nonce}, salt=_salt(classroom, by), compress=True)


def roster_unsign(value: str, *, classroom: Classroom, by: AbstractBaseUser, nonce: str | None) -> str | None:
    """The file that ``roster_sign`` signed for this class, instructor and nonce, or None
    (tampered, from another preview, confirmed already, or older than ``CONFIRM_MAX_AGE_S``)."""
    try:
        payload = signing.loads(value, salt=_salt(classroom, by), max_age=CONFIRM_MAX_AGE_S)
    except signing.BadSignature:
        return None
    if not nonce or not isinstance(payload, dict) or payload.get("nonce") != nonce:
        return None
    text = payload.get("csv")
    return text if isinstance(text, str) else None


def _salt(classroom: Classroom, by: AbstractBaseUser) -> str:
    return f"labapp.classes.roster:{classroom.pk}:{by.pk}"


def roster_import(*, classroom: Classroom, data: bytes, by: AbstractBaseUser) -> tuple[list[Created], list[RosterRow]]:
    """Create the rows without errors (checked again now) in one transaction; error rows create nothing.

    Returns the created accounts with their generated passwords, and the rows skipped.
    """
    with transaction.atomic():
        rows = roster_read(data, classroom)
        created = []
        for row in (r for r in rows if r.ok):
            password = row.password or services.password_new()
            user = User.objects.create_user(username=row.username, email=row.email, password=password)
            Membership.objects.create(classroom=classroom, user=user, role=row.role)
            TemporaryPassword.objects.create(user=user, set_by_id=by.pk)
            created.append(Created(user, row.role, "" if row.password else password))
    return created, [r for r in rows if not r.ok]
