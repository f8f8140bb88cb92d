"""A Spider-format dataset built offline: SQLite databases with related tables, and questions with gold SQL.

Six databases (music, university, shop, hospital, airline, library), two related tables each (a parent with a
name, categories and numbers; a child with a foreign key to it), rows drawn from fixed value lists. Questions come
from templates in Spider's style (counts, filters, comparisons, aggregates, GROUP BY, ORDER BY, LIMIT, DISTINCT,
joins), each with several wordings and the values of the database. Every gold query is executed while building:
a question whose answer is empty is dropped. Deterministic from the seed.

The layout is Spider's (what `prepare_dataset.py --spider-dir` converts): `database/<db_id>/<db_id>.sqlite` and
records `{"db_id", "question", "query"}`.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

FIRST_NAMES = (
    "Anna", "Ben", "Carla", "David", "Elena", "Farid", "Grace", "Hugo", "Ines", "Jonas", "Kira", "Liam", "Maya",
    "Noah", "Olga", "Pablo", "Quinn", "Rosa", "Sami", "Tara", "Umar", "Vera", "Wes", "Yara", "Zane",
)  # fmt: skip
LAST_NAMES = (
    "Smith", "Garcia", "Chen", "Muller", "Rossi", "Kim", "Novak", "Silva", "Khan", "Dubois", "Berg", "Lopez",
)  # fmt: skip
COUNTRIES = ("France", "Japan", "Brazil", "Canada", "Germany", "India", "Kenya", "Spain")
CITIES = ("Paris", "Tokyo", "Lima", "Boston", "Berlin", "Madrid", "Oslo", "Cairo")


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    kind: str  # "id", "name", "category", "number", "foreign"
    phrase: str = ""  # how questions say it ("country", "age")
    values: tuple[str, ...] = ()  # categories: the choices; numbers: (low, high)


@dataclass(slots=True)
class Table:
    name: str
    noun: str  # "singer"
    plural: str  # "singers"
    columns: list[Column]
    rows: int
    parent: Table | None = None  # the table a "foreign" column points to
    data: list[tuple] = field(default_factory=list)

    @property
    def key(self) -> str:
        return next(c.name for c in self.columns if c.kind == "id")

    @property
    def name_column(self) -> Column:
        return next(c for c in self.columns if c.kind == "name")

    def of_kind(self, kind: str) -> list[Column]:
        return [c for c in self.columns if c.kind == kind]


def _people(rng: random.Random, count: int) -> list[str]:
    names = [f"{first} {last}" for first in FIRST_NAMES for last in LAST_NAMES]
    return rng.sample(names, count)


def _titles(rng: random.Random, words: tuple[str, ...], count: int) -> list[str]:
    pairs = [f"{a} {b}" for a in words for b in words if a != b]
    return rng.sample(pairs, count)


TITLE_WORDS = ("Blue", "Silent", "Golden", "Night", "River", "Storm", "Paper", "Winter", "Echo", "Stone", "Light")


def _schemas() -> dict[str, list[Table]]:
    """The databases: a parent table and a child table pointing at it."""

    def pair(parent: Table, child: Table) -> list[Table]:
        child.parent = parent
        return [parent, child]

    n, c, x = "name", "category", "number"
    return {
        "music": pair(
            Table("singer", "singer", "singers", [Column("singer_id", "id"), Column("name", n, "name"),
                  Column("country", c, "country", COUNTRIES), Column("genre", c, "genre",
                  ("pop", "rock", "jazz", "folk", "soul")), Column("age", x, "age", ("19", "70"))], 24),
            Table("album", "album", "albums", [Column("album_id", "id"), Column("title", n, "title"),
                  Column("singer_id", "foreign"), Column("label", c, "label", ("Sonic", "Vertex", "Harbor", "Nova")),
                  Column("year", x, "year", ("1990", "2023")), Column("sales", x, "sales", ("1000", "90000"))], 60),
        ),
        "university": pair(
            Table("department", "department", "departments", [Column("dept_id", "id"), Column("name", n, "name"),
                  Column("building", c, "building", ("North Hall", "South Hall", "Main Hall", "Lab Wing")),
                  Column("budget", x, "budget", ("100000", "900000"))], 16),
            Table("professor", "professor", "professors", [Column("prof_id", "id"), Column("name", n, "name"),
                  Column("dept_id", "foreign"), Column("rank", c, "rank", ("assistant", "associate", "full")),
                  Column("salary", x, "salary", ("40000", "160000")), Column("age", x, "age", ("28", "70"))], 50),
        ),
        "shop": pair(
            Table("customer", "customer", "customers", [Column("customer_id", "id"), Column("name", n, "name"),
                  Column("city", c, "city", CITIES), Column("membership", c, "membership",
                  ("gold", "silver", "basic")), Column("age", x, "age", ("18", "80"))], 30),
            Table("orders", "order", "orders", [Column("order_id", "id"), Column("product", n, "product"),
                  Column("customer_id", "foreign"), Column("status", c, "status",
                  ("shipped", "pending", "returned")), Column("quantity", x, "quantity", ("1", "20")),
                  Column("total", x, "total", ("5", "900"))], 70),
        ),
        "hospital": pair(
            Table("doctor", "doctor", "doctors", [Column("doctor_id", "id"), Column("name", n, "name"),
                  Column("specialty", c, "specialty", ("cardiology", "surgery", "pediatrics", "neurology")),
                  Column("years", x, "years of experience", ("1", "40"))], 18),
            Table("patient", "patient", "patients", [Column("patient_id", "id"), Column("name", n, "name"),
                  Column("doctor_id", "foreign"), Column("city", c, "city", CITIES),
                  Column("age", x, "age", ("1", "95"))], 60),
        ),
        "airline": pair(
            Table("airline", "airline", "airlines", [Column("airline_id", "id"), Column("name", n, "name"),
                  Column("country", c, "country", COUNTRIES), Column("fleet", x, "fleet size", ("5", "300"))], 14),
            Table("flight", "flight", "flights", [Column("flight_id", "id"), Column("code", n, "code"),
                  Column("airline_id", "foreign"), Column("origin", c, "origin", CITIES),
                  Column("distance", x, "distance", ("200", "9000")), Column("price", x, "price", ("50", "1500"))],
                  60),
        ),
        "library": pair(
            Table("author", "author", "authors", [Column("author_id", "id"), Column("name", n, "name"),
                  Column("nationality", c, "nationality", COUNTRIES),
                  Column("birth_year", x, "birth year", ("1900", "1995"))], 20),
            Table("book", "book", "books", [Column("book_id", "id"), Column("title", n, "title"),
                  Column("author_id", "foreign"), Column("genre", c, "genre",
                  ("novel", "poetry", "history", "science")), Column("pages", x, "pages", ("80", "900"))], 60),
        ),
    }  # fmt: skip


def _fill(table: Table, rng: random.Random) -> None:
    name_column = table.name_column
    if name_column.name == "name":
        names = _people(rng, table.rows) if table.noun not in ("department", "airline") else None
        if names is None:
            stems = ("Apex", "Borealis", "Cobalt", "Delta", "Ember", "Falcon", "Granite", "Horizon", "Iris",
                     "Juniper", "Keystone", "Lumen", "Meridian", "Nimbus", "Orion", "Pioneer", "Quartz")  # fmt: skip
            suffix = " Air" if table.noun == "airline" else " Studies"
            names = [stem + suffix for stem in rng.sample(stems, table.rows)]
    elif name_column.name == "code":
        names = [f"{rng.choice('ABCDEFGH')}{rng.choice('KLMNPRST')}{100 + i * 7}" for i in range(table.rows)]
    elif name_column.name == "product":
        goods = ("lamp", "chair", "kettle", "camera", "bicycle", "blender", "jacket", "speaker", "tent", "watch")
        names = [rng.choice(goods) for _ in range(table.rows)]
    else:
        names = _titles(rng, TITLE_WORDS, table.rows)
    parent_keys = list(range(1, table.parent.rows + 1)) if table.parent else []
    for index in range(table.rows):
        row: list[object] = []
        for column in table.columns:
            if column.kind == "id":
                row.append(index + 1)
            elif column.kind == "name":
                row.append(names[index])
            elif column.kind == "category":
                row.append(rng.choice(column.values))
            elif column.kind == "number":
                low, high = int(column.values[0]), int(column.values[1])
                row.append(rng.randint(low, high))
            else:
                row.append(rng.choice(parent_keys))
        table.data.append(tuple(row))


def _create_statement(table: Table) -> str:
    lines = []
    for column in table.columns:
        kind = "TEXT" if column.kind in ("name", "category") else "INTEGER"
        lines.append(f"  {column.name} {kind}" + (" PRIMARY KEY" if column.kind == "id" else ""))
    if table.parent is not None:
        foreign = next(c.name for c in table.columns if c.kind == "foreign")
        lines.append(f"  FOREIGN KEY ({foreign}) REFERENCES {table.parent.name}({table.parent.key})")
    return f"CREATE TABLE {table.name} (\n" + ",\n".join(lines) + "\n)"


def write_database(path: Path, tables: list[Table]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    with sqlite3.connect(path) as connection:
        for table in tables:
            connection.execute(_create_statement(table))
            marks = ", ".join("?" for _ in table.columns)
            connection.executemany(f"INSERT INTO {table.name} VALUES ({marks})", table.data)
    connection.close()


# --- questions ------------------------------------------------------------------------------------------------
Template = Callable[[Table, random.Random], Iterator[tuple[str, str]]]


def _pick(rng: random.Random, wordings: tuple[str, ...], **slots: str) -> str:
    return rng.choice(wordings).format(**slots)


def _values(table: Table, column: Column) -> list[object]:
    index = table.columns.index(column)
    return sorted({row[index] for row in table.data})  # values that exist: answers are not all empty


def _thresholds(table: Table, column: Column) -> list[int]:
    values = sorted(int(v) for v in _values(table, column))  # type: ignore[call-overload]
    return sorted({values[len(values) * q // 5] for q in range(1, 5)})


def count_all(table: Table, rng: random.Random) -> Iterator[tuple[str, str]]:
    for wording in (
        "How many {plural} are there?",
        "Count the number of {plural}.",
        "What is the total number of {plural}?",
        "Find the number of {plural}.",
    ):
        yield wording.format(plural=table.plural), f"SELECT count(*) FROM {table.name}"


def count_where(table: Table, rng: random.Random) -> Iterator[tuple[str, str]]:
    wordings = (
        "How many {plural} have {col} {value}?",
        "Count the {plural} whose {col} is {value}.",
        "What is the number of {plural} with {col} {value}?",
        "How many {plural} are there with {col} {value}?",
    )
    for column in table.of_kind("category"):
        for value in _values(table, column):
            for wording in wordings:
                question = wording.format(plural=table.plural, col=column.phrase, value=value)
                yield question, f"SELECT count(*) FROM {table.name} WHERE {column.name} = '{value}'"


def names_where(table: Table, rng: random.Random) -> Iterator[tuple[str, str]]:
    name = table.name_column
    wordings = (
        "What are the {name}s of {plural} whose {col} is {value}?",
        "List the {name} of every {noun} with {col} {value}.",
        "Show the {name}s of {plural} that have {col} {value}.",
        "Which {plural} have {col} {value}? Give their {name}s.",
    )
    for column in table.of_kind("category"):
        for value in _values(table, column):
            for wording in wordings:
                question = wording.format(
                    name=name.phrase, plural=table.plural, noun=table.noun, col=column.phrase, value=value
                )
                yield question, f"SELECT {name.name} FROM {table.name} WHERE {column.name} = '{value}'"


def names_compared(table: Table, rng: random.Random) -> Iterator[tuple[str, str]]:
    name = table.name_column
    above = (
        "List the {name}s of {plural} with {col} greater than {value}.",
        "Which {plural} have {col} above {value}? Give their {name}s.",
        "Find the {name} of {plural} whose {col} is more than {value}.",
    )
    below = (
        "List the {name}s of {plural} with {col} less than {value}.",
        "Which {plural} have {col} below {value}? Give their {name}s.",
        "Find the {name} of {plural} whose {col} is smaller than {value}.",
    )
    for column in table.of_kind("number"):
        for value in _thresholds(table, column):
            for wordings, operator in ((above, ">"), (below, "<")):
                for wording in wordings:
                    question = wording.format(name=name.phrase, plural=table.plural, col=column.phrase, value=value)
                    yield question, f"SELECT {name.name} FROM {table.name} WHERE {column.name} {operator} {value}"


AGGREGATES = (
    ("avg", ("average", "mean")),
    ("max", ("maximum", "largest", "highest")),
    ("min", ("minimum", "smallest", "lowest")),
    ("sum", ("total",)),
)


def aggregate(table: Table, rng: random.Random) -> Iterator[tuple[str, str]]:
    wordings = (
        "What is the {agg} {col} of all {plural}?",
        "Find the {agg} {col} of {plural}.",
        "Show the {agg} {col} among {plural}.",
    )
    for column in table.of_kind("number"):
        for function, words in AGGREGATES:
            for word in words:
                for wording in wordings:
                    question = wording.format(agg=word, col=column.phrase, plural=table.plural)
                    yield question, f"SELECT {function}({column.name}) FROM {table.name}"


def aggregate_where(table: Table, rng: random.Random) -> Iterator[tuple[str, str]]:
    wordings = (
        "What is the {agg} {col} of {plural} whose {cat} is {value}?",
        "Find the {agg} {col} of {plural} with {cat} {value}.",
    )
    for column in table.of_kind("number"):
        for category in table.of_kind("category"):
            for value in _values(table, category):
                for function, words in AGGREGATES:
                    word = rng.choice(words)
                    question = _pick(
                        rng,
                        wordings,
                        agg=word,
                        col=column.phrase,
                        plural=table.plural,
                        cat=category.phrase,
                        value=str(value),
                    )
                    sql = f"SELECT {function}({column.name}) FROM {table.name} WHERE {category.name} = '{value}'"
                    yield question, sql


def group_count(table: Table, rng: random.Random) -> Iterator[tuple[str, str]]:
    wordings = (
        "How many {plural} are there for each {col}?",
        "For each {col}, count the {plural}.",
        "Show each {col} and the number of {plural}.",
        "Count the {plural} in each {col}.",
    )
    for column in table.of_kind("category"):
        for wording in wordings:
            question = wording.format(plural=table.plural, col=column.phrase)
            yield question, f"SELECT {column.name}, count(*) FROM {table.name} GROUP BY {column.name}"


def ordered(table: Table, rng: random.Random) -> Iterator[tuple[str, str]]:
    name = table.name_column
    down = (
        "List the {name}s of {plural} in descending order of {col}.",
        "Sort the {plural} by {col} from highest to lowest and show their {name}s.",
    )
    up = (
        "List the {name}s of {plural} in ascending order of {col}.",
        "Sort the {plural} by {col} from lowest to highest and show their {name}s.",
    )
    for column in table.of_kind("number"):
        for wordings, direction in ((down, "DESC"), (up, "ASC")):
            for wording in wordings:
                question = wording.format(name=name.phrase, plural=table.plural, col=column.phrase)
                yield question, f"SELECT {name.name} FROM {table.name} ORDER BY {column.name} {direction}"


def top_one(table: Table, rng: random.Random) -> Iterator[tuple[str, str]]:
    name = table.name_column
    high = (
        "What is the {name} of the {noun} with the highest {col}?",
        "Which {noun} has the largest {col}? Give the {name}.",
    )
    low = (
        "What is the {name} of the {noun} with the lowest {col}?",
        "Which {noun} has the smallest {col}? Give the {name}.",
    )
    for column in table.of_kind("number"):
        for wordings, direction in ((high, "DESC"), (low, "ASC")):
            for wording in wordings:
                question = wording.format(name=name.phrase, noun=table.noun, col=column.phrase)
                yield question, f"SELECT {name.name} FROM {table.name} ORDER BY {column.name} {direction} LIMIT 1"


def distinct(table: Table, rng: random.Random) -> Iterator[tuple[str, str]]:
    for column in table.of_kind("category"):
        for wording in (
            "What are the distinct values of {col} among {plural}?",
            "List all different {col} values of {plural}.",
        ):
            question = wording.format(col=column.phrase, plural=table.plural)
            yield question, f"SELECT DISTINCT {column.name} FROM {table.name}"


def joined(table: Table, rng: random.Random) -> Iterator[tuple[str, str]]:
    parent = table.parent
    if parent is None:
        return
    foreign = next(c.name for c in table.columns if c.kind == "foreign")
    join = f"FROM {parent.name} AS T1 JOIN {table.name} AS T2 ON T1.{parent.key} = T2.{foreign}"
    child_name, parent_name = table.name_column, parent.name_column
    wordings = (
        "What are the {name}s of {plural} whose {parent} has {col} {value}?",
        "List the {name} of each {noun} whose {parent} has {col} {value}.",
    )
    for column in parent.of_kind("category"):
        for value in _values(parent, column):
            for wording in wordings:
                question = wording.format(
                    name=child_name.phrase,
                    plural=table.plural,
                    noun=table.noun,
                    parent=parent.noun,
                    col=column.phrase,
                    value=value,
                )
                yield question, f"SELECT T2.{child_name.name} {join} WHERE T1.{column.name} = '{value}'"
    for wording in (
        "How many {plural} does each {parent} have? Show the {parent} {pname} and the count.",
        "For each {parent}, show its {pname} and the number of {plural}.",
    ):
        question = wording.format(plural=table.plural, parent=parent.noun, pname=parent_name.phrase)
        yield question, f"SELECT T1.{parent_name.name}, count(*) {join} GROUP BY T1.{parent_name.name}"
    for wording in (
        "Show the {name} of each {noun} and the {pname} of its {parent}.",
        "List every {noun} {name} together with its {parent} {pname}.",
    ):
        question = wording.format(name=child_name.phrase, noun=table.noun, parent=parent.noun, pname=parent_name.phrase)
        yield question, f"SELECT T2.{child_name.name}, T1.{parent_name.name} {join}"


TEMPLATES: tuple[Template, ...] = (
    count_all,
    count_where,
    names_where,
    names_compared,
    aggregate,
    aggregate_where,
    group_count,
    ordered,
    top_one,
    distinct,
    joined,
)


@dataclass(frozen=True, slots=True)
class SpiderSet:
    train: list[dict[str, str]]
    dev: list[dict[str, str]]


def build(directory: str | Path, *, seed: int = 0, dev_share: float = 0.3) -> SpiderSet:
    """Write `database/<db_id>/<db_id>.sqlite` under `directory` and return the questions, split by question
    (a dev question's text never appears in train). Deterministic from `seed`."""
    rng = random.Random(seed)
    root = Path(directory)
    records: dict[str, dict[str, str]] = {}
    for db_id, tables in _schemas().items():
        for table in tables:
            _fill(table, rng)
        path = root / "database" / db_id / f"{db_id}.sqlite"
        write_database(path, tables)
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
            for table in tables:
                for template in TEMPLATES:
                    for question, query in template(table, rng):
                        if question in records or not connection.execute(query).fetchall():
                            continue
                        records[question] = {"db_id": db_id, "question": question, "query": query}
        connection.close()
    questions = sorted(records)
    rng.shuffle(questions)
    cut = int(len(questions) * dev_share)
    dev, train = questions[:cut], questions[cut:]
    return SpiderSet([records[q] for q in train], [records[q] for q in dev])
