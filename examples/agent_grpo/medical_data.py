"""The tutorial's data, generated offline: a drugs/disease SQLite database, questions with reference answers and
SQL, and raw rated answers for the reward model (`python medical_data.py data/`).

Tables (the seed's `drugs_info` and `disease`):
    drugs_info(name, indication, dosage, drug_class, prescription)     disease(name, symptoms, department)
Questions ask what a drug treats, its dose, its class, whether it needs a prescription, or which department sees a
disease; each has the SQL that answers it and the facts a correct answer must state. The raw preference lines rate
four answers per question: the database's answer (5), a correct but vague one (3), a refusal (1) and a confident
answer with a wrong fact (0): what `lightning-otel reward-model convert` turns into TRL's pairs. Deterministic.
"""

from __future__ import annotations

import json
import random
import sqlite3
import sys
from pathlib import Path
from typing import Any

# The agent's instructions (agent.py), here so the trainer can build a tokenizer without the Agents SDK installed.
INSTRUCTIONS = (
    "You answer questions about drugs and diseases. Query the SQLite database with run_sql: tables "
    "drugs_info(name, indication, dosage, drug_class, prescription) and disease(name, symptoms, department). "
    "Then answer in one sentence that states what the database says."
)

DISEASES = [
    ("migraine", "throbbing headache, nausea, light sensitivity", "neurology"),
    ("hypertension", "often none; headache at very high pressure", "cardiology"),
    ("type 2 diabetes", "thirst, frequent urination, fatigue", "endocrinology"),
    ("asthma", "wheezing, shortness of breath, chest tightness", "pulmonology"),
    ("gastric reflux", "heartburn, regurgitation, chest pain after meals", "gastroenterology"),
    ("bacterial pneumonia", "fever, cough with sputum, chest pain", "pulmonology"),
    ("depression", "low mood, loss of interest, poor sleep", "psychiatry"),
    ("hypothyroidism", "fatigue, weight gain, cold intolerance", "endocrinology"),
    ("rheumatoid arthritis", "joint pain, morning stiffness, swelling", "rheumatology"),
    ("allergic rhinitis", "sneezing, runny nose, itchy eyes", "allergy"),
    ("angina", "chest pressure on exertion", "cardiology"),
    ("epilepsy", "recurrent seizures", "neurology"),
    ("gout", "sudden severe joint pain, redness", "rheumatology"),
    ("urinary tract infection", "burning urination, frequency, urgency", "urology"),
    ("insomnia", "difficulty falling or staying asleep", "psychiatry"),
    ("osteoporosis", "fractures after minor falls, height loss", "endocrinology"),
]
DRUGS = [
    ("sumatriptan", "migraine", "50 mg at onset, may repeat after 2 hours", "triptan", 1),
    ("amlodipine", "hypertension", "5 mg once daily", "calcium channel blocker", 1),
    ("lisinopril", "hypertension", "10 mg once daily", "ACE inhibitor", 1),
    ("metformin", "type 2 diabetes", "500 mg twice daily with meals", "biguanide", 1),
    ("salbutamol", "asthma", "100 micrograms inhaled as needed", "beta-2 agonist", 1),
    ("omeprazole", "gastric reflux", "20 mg once daily before breakfast", "proton pump inhibitor", 0),
    ("amoxicillin", "bacterial pneumonia", "500 mg three times daily", "penicillin antibiotic", 1),
    ("sertraline", "depression", "50 mg once daily", "SSRI", 1),
    ("levothyroxine", "hypothyroidism", "50 micrograms once daily on waking", "thyroid hormone", 1),
    ("methotrexate", "rheumatoid arthritis", "7.5 mg once weekly", "DMARD", 1),
    ("cetirizine", "allergic rhinitis", "10 mg once daily", "antihistamine", 0),
    ("nitroglycerin", "angina", "0.4 mg under the tongue as needed", "nitrate", 1),
    ("levetiracetam", "epilepsy", "500 mg twice daily", "anticonvulsant", 1),
    ("allopurinol", "gout", "100 mg once daily", "xanthine oxidase inhibitor", 1),
    ("nitrofurantoin", "urinary tract infection", "100 mg twice daily for 5 days", "antibiotic", 1),
    ("zolpidem", "insomnia", "5 mg at bedtime", "hypnotic", 1),
    ("alendronate", "osteoporosis", "70 mg once weekly", "bisphosphonate", 1),
    ("ibuprofen", "rheumatoid arthritis", "400 mg three times daily with food", "NSAID", 0),
    ("loratadine", "allergic rhinitis", "10 mg once daily", "antihistamine", 0),
    ("budesonide", "asthma", "200 micrograms inhaled twice daily", "inhaled corticosteroid", 1),
]


def build_database(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE disease (name TEXT PRIMARY KEY, symptoms TEXT, department TEXT)")
        db.execute(
            "CREATE TABLE drugs_info (name TEXT PRIMARY KEY, indication TEXT REFERENCES disease(name), "
            "dosage TEXT, drug_class TEXT, prescription INTEGER)"
        )
        db.executemany("INSERT INTO disease VALUES (?, ?, ?)", DISEASES)
        db.executemany("INSERT INTO drugs_info VALUES (?, ?, ?, ?, ?)", DRUGS)
    return path


def questions() -> list[dict[str, Any]]:
    """Every question with its SQL, the facts a right answer states, a reference answer and a wrong one."""
    rng = random.Random(3)
    out = []
    for name, indication, dosage, _drug_class, prescription in DRUGS:
        wrong_disease = rng.choice([d[0] for d in DISEASES if d[0] != indication])
        wrong_dose = rng.choice([d[2] for d in DRUGS if d[2] != dosage])
        needs = "needs a prescription" if prescription else "is available without a prescription"
        out += [
            {
                "question": f"What is {name} used to treat?",
                "sql": f"SELECT indication FROM drugs_info WHERE name = '{name}'",
                "facts": [indication],
                "answer": f"{name.capitalize()} is used to treat {indication}.",
                "wrong": f"{name.capitalize()} is used to treat {wrong_disease}.",
            },
            {
                "question": f"What is the usual dose of {name}?",
                "sql": f"SELECT dosage FROM drugs_info WHERE name = '{name}'",
                "facts": [dosage],
                "answer": f"The usual dose of {name} is {dosage}.",
                "wrong": f"The usual dose of {name} is {wrong_dose}.",
            },
            {
                "question": f"Does {name} need a prescription?",
                "sql": f"SELECT prescription FROM drugs_info WHERE name = '{name}'",
                "facts": ["yes" if prescription else "no"],
                "answer": f"{'Yes' if prescription else 'No'}, {name} {needs}.",
                "wrong": f"{'No' if prescription else 'Yes'}, {name} "
                f"{'is available without a prescription' if prescription else 'needs a prescription'}.",
            },
        ]
    for name, _symptoms, department in DISEASES:
        wrong_department = rng.choice(sorted({d[2] for d in DISEASES} - {department}))
        out.append(
            {
                "question": f"Which department treats {name}?",
                "sql": f"SELECT department FROM disease WHERE name = '{name}'",
                "facts": [department],
                "answer": f"{name.capitalize()} is treated in {department}.",
                "wrong": f"{name.capitalize()} is treated in {wrong_department}.",
            }
        )
    for index, item in enumerate(out):
        item["id"] = f"med-{index:03d}"
    return out


def split(items: list[dict[str, Any]], test_share: float = 0.25) -> tuple[list, list]:
    shuffled = items[:]
    random.Random(7).shuffle(shuffled)
    cut = round(len(shuffled) * (1 - test_share))
    return shuffled[:cut], shuffled[cut:]


VAGUE = [
    "It depends on the patient; please ask a doctor.",
    "That is a common medical question.",
    "There are several possibilities to consider.",
]
REFUSALS = ["I don't know.", "I cannot answer that.", "Sorry, I have no information about this."]


def raw_preferences(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Four rated answers per question (the shape `reward-model convert` reads)."""
    rng = random.Random(11)
    return [
        {
            "question": item["question"],
            "answers": [
                {"text": item["answer"], "score": 5},
                {"text": rng.choice(VAGUE), "score": 3},
                {"text": rng.choice(REFUSALS), "score": 1},
                {"text": item["wrong"], "score": 0},
            ],
        }
        for item in items
    ]


def answer_is_right(answer: str, facts: list[str]) -> bool:
    """The execution check: the answer states every fact the database holds for the question."""
    text = answer.lower()
    return all(fact.lower() in text for fact in facts)


def write_all(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    train, test = split(questions())
    paths = {"database": build_database(folder / "medical.sqlite3")}
    for name, rows in (("train", train), ("test", test)):
        paths[name] = folder / f"questions_{name}.jsonl"
        paths[name].write_text("".join(json.dumps(row) + "\n" for row in rows))
    paths["raw_preferences"] = folder / "raw_preferences.jsonl"
    paths["raw_preferences"].write_text("".join(json.dumps(r) + "\n" for r in raw_preferences(train)))
    return paths


if __name__ == "__main__":
    for kind, path in write_all(Path(sys.argv[1] if len(sys.argv) > 1 else "data")).items():
        print(f"{kind:16s} {path}")
