"""Writes the front door agents' task files into tasks/ (committed; run again to remake them the same):
train and held-out validation tasks for each, and the inventory agent's warm-start examples.

    python make_tasks.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from inventory import TOOLS, stock

TASKS = Path(__file__).resolve().parent / "tasks"

ANTONYMS = {
    "hot": ["cold"], "big": ["small", "little"], "up": ["down"], "fast": ["slow"], "happy": ["sad", "unhappy"],
    "light": ["dark", "heavy"], "open": ["closed", "shut"], "early": ["late"], "full": ["empty"],
    "high": ["low"], "young": ["old"], "rich": ["poor"], "strong": ["weak"], "wet": ["dry"], "hard": ["soft", "easy"],
    "long": ["short"], "thick": ["thin"], "clean": ["dirty"], "loud": ["quiet", "soft"], "day": ["night"],
    "win": ["lose"], "push": ["pull"], "buy": ["sell"], "give": ["take", "receive"], "first": ["last"],
    "begin": ["end", "finish"], "true": ["false"], "good": ["bad", "evil"], "love": ["hate"], "old": ["new", "young"],
    "left": ["right"], "inside": ["outside"], "north": ["south"], "east": ["west"], "top": ["bottom"],
    "front": ["back", "rear"], "cheap": ["expensive"], "safe": ["dangerous", "unsafe"], "sweet": ["sour", "bitter"],
    "deep": ["shallow"], "wide": ["narrow"], "near": ["far"], "empty": ["full"], "heavy": ["light"],
    "asleep": ["awake"], "laugh": ["cry"], "friend": ["enemy", "foe"], "always": ["never"], "more": ["less", "fewer"],
    "above": ["below", "beneath"], "before": ["after"], "arrive": ["leave", "depart"], "accept": ["reject", "refuse"],
    "add": ["subtract", "remove"], "alive": ["dead"], "answer": ["question", "ask"], "brave": ["cowardly", "afraid"],
    "bright": ["dim", "dark"], "calm": ["angry", "stormy"], "dark": ["light", "bright"], "sharp": ["dull", "blunt"],
    "smooth": ["rough"], "tight": ["loose"], "tall": ["short"], "quiet": ["loud", "noisy"], "polite": ["rude"],
    "present": ["absent", "past"], "public": ["private"], "raise": ["lower"], "remember": ["forget"],
    "rise": ["fall", "set"], "same": ["different"], "start": ["stop", "finish", "end"], "success": ["failure"],
    "thin": ["thick", "fat"], "under": ["over"], "war": ["peace"], "warm": ["cool", "cold"], "wrong": ["right"],
    "yes": ["no"], "entrance": ["exit"], "maximum": ["minimum"], "include": ["exclude"], "increase": ["decrease"],
    "inner": ["outer"], "major": ["minor"], "positive": ["negative"], "question": ["answer"], "ancient": ["modern"],
    "clever": ["stupid", "foolish"], "lazy": ["active", "busy", "hardworking"], "gentle": ["rough", "harsh"],
    "generous": ["selfish", "stingy"], "guilty": ["innocent"], "hungry": ["full"], "noisy": ["quiet"],
    "pretty": ["ugly"], "sick": ["healthy", "well"], "wild": ["tame"], "odd": ["even"], "sunny": ["cloudy", "rainy"],
}  # fmt: skip


def words(text: str) -> list[str]:
    return text.split()


PRODUCTS = words(
    "lamp chair kettle bicycle umbrella backpack blender toaster notebook pencil camera guitar helmet blanket "
    "pillow teapot wallet mirror candle scarf jacket sneakers watch clock radio speaker keyboard mouse monitor "
    "printer scanner router charger battery flashlight tent hammock kayak skateboard scooter drone telescope "
    "microscope compass map globe puzzle kite yoyo marble crayon easel canvas brush sponge towel soap shampoo "
    "toothbrush comb razor perfume lotion sunscreen sandals boots gloves mittens beanie apron oven fridge freezer "
    "dishwasher microwave mixer grill skillet wok ladle spatula whisk colander thermos mug bottle jar basket"
)
ITEMS = words(
    "bolts nails screws hammers wrenches drills ladders shovels rakes hoses buckets gloves helmets ropes chains "
    "tarps pallets crates barrels valves pipes hinges locks keys bulbs fuses cables switches sockets plugs"
)
WAREHOUSES = words("north south east west central harbor airport river hill valley")
DRILL_ITEMS = words("washers rivets clamps brackets springs gaskets")  # the warm start's: no task's
# the reviews' phrases: the first four of each kind in training, the last four only in the held-out reviews
PRAISE = ("works perfectly and I use it every day", "is sturdy, well made and worth every penny",
          "arrived early and exceeded my expectations", "is the best purchase I made this year",
          "made my mornings so much easier, I love it", "looks great and feels solid in the hand",
          "does exactly what it promised, five stars", "is a delight and I bought a second one")  # fmt: skip
COMPLAINTS = ("broke after two days and support never answered", "is flimsy and cheaply made, a waste of money",
              "arrived late and did not work at all", "is the worst purchase I made this year",
              "stopped working within a week, I want a refund", "feels cheap and the parts do not fit",
              "was missing pieces and smelled of burnt plastic", "is a disappointment and I returned it")  # fmt: skip


def write(name: str, rows: list[dict]) -> None:
    (TASKS / name).write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def split(rows: list[dict], val: int, seed: int) -> tuple[list[dict], list[dict]]:
    rows = list(rows)
    random.Random(seed).shuffle(rows)
    return rows[val:], rows[:val]


def review_tasks(products: list[str], phrases: slice) -> list[dict]:
    """A review of each product: half praise, half complaint, from the given phrases of each kind."""
    rows = []
    for index, product in enumerate(products):
        label = "positive" if index % 2 == 0 else "negative"
        kind = (PRAISE if label == "positive" else COMPLAINTS)[phrases]
        rows.append({"review": f"This {product} {kind[index // 2 % len(kind)]}.", "label": label})
    return rows


def warm_start_examples() -> list[dict]:
    """Check-ups phrased otherwise than the tasks, answered by a scripted clerk: the call, then the answer."""
    examples = []
    for index, (item, warehouse) in enumerate((i, w) for i in DRILL_ITEMS for w in ("north", "harbor")):
        arguments = json.dumps({"item": item, "warehouse": warehouse})
        call = {"id": f"call_{index}", "type": "function", "function": {"name": "stock", "arguments": arguments}}
        asked = [{"role": "user", "content": f"Stock check: {item} at {warehouse}."}]
        called = {"role": "assistant", "content": "", "tool_calls": [call]}
        count = stock(item, warehouse)
        examples.append({"messages": [*asked, called], "tools": TOOLS})
        told = {"role": "tool", "tool_call_id": call["id"], "content": str(count)}
        examples.append({"messages": [*asked, called, told, {"role": "assistant", "content": str(count)}],
                         "tools": TOOLS})  # fmt: skip
    return examples


def main() -> None:
    TASKS.mkdir(exist_ok=True)
    antonyms = [{"word": word, "answers": answers} for word, answers in ANTONYMS.items()]
    train, val = split(antonyms, 32, seed=1)
    write("antonyms_train.jsonl", train)
    write("antonyms_val.jsonl", val)
    train, val = split([{"product": product} for product in PRODUCTS], 32, seed=2)
    write("slogans_train.jsonl", train)
    write("slogans_val.jsonl", val)
    pairs = [{"item": item, "warehouse": warehouse} for item in ITEMS for warehouse in WAREHOUSES]
    train, val = split(pairs, 32, seed=3)
    write("inventory_train.jsonl", train[:128])
    write("inventory_val.jsonl", val)
    write("inventory_warm_start.jsonl", warm_start_examples())
    train, val = split([{"product": product} for product in PRODUCTS], 32, seed=4)
    write("reviews_train.jsonl", review_tasks([row["product"] for row in train], slice(0, 4)))
    write("reviews_val.jsonl", review_tasks([row["product"] for row in val], slice(4, 8)))
    print(f"task files in {TASKS}")


if __name__ == "__main__":
    main()
