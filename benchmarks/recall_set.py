"""The evaluation set written for agent-memory (docs/evaluation.md): ten people, each talking
with an assistant over dated sessions, and questions with the ids of the turns that answer.

It is built by :func:`conversations` from the tables below, the same every time (a seeded
generator picks fillers and dates), rather than kept as a data file. Each person gets other
values for the same kinds of fact, told in their own sessions among small talk and the
assistant's replies (which often repeat the fact's words, so full text alone finds distractors).
Questions come in four kinds:

* ``lexical``: shares words with its answer ("What is my dog called?");
* ``paraphrase``: shares no word (after stop words and stemming) with its answer; checked here;
* ``changed``: the fact changed in a later session; only the latest turn counts;
* ``temporal``: when something happened; the answer turn's session carries the date.

Every question is asked on the day after the person's last session.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

# Each kind: the user's statement, then (question, category) pairs. {slots} are filled from the
# person's values. Paraphrase questions must share no content word with the statement.
KINDS: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "pet": (
        "I adopted a {pet} called {pet_name} from the shelter this weekend.",
        [
            ("What is my {pet} called?", "lexical"),
            ("Which animal lives with me now?", "paraphrase"),
            ("When did {pet_name} join the family?", "temporal"),
            ("Any news about {pet_name}?", "lexical"),
        ],
    ),
    "instrument": (
        "I've started taking {instrument} lessons every Tuesday evening.",
        [
            ("Which instrument am I taking lessons for?", "lexical"),
            ("What music do I practise weekly with a teacher?", "paraphrase"),
        ],
    ),
    "allergy": (
        "I'm allergic to {allergen}, so I always read the labels.",
        [
            ("What am I allergic to?", "lexical"),
            ("Which ingredient would make me sick if a host cooked with it?", "paraphrase"),
        ],
    ),
    "race": (
        "I ran the {race} on Sunday and finished in {race_time}.",
        [
            ("What was my finishing time in the {race}?", "lexical"),
            ("How quick was I at that long-distance competition?", "paraphrase"),
            ("When did I run the {race}?", "temporal"),
        ],
    ),
    "car": (
        "I bought a used car, a {car}, to get to the office.",
        [
            ("What car did I buy?", "lexical"),
            ("Which vehicle do I commute in?", "paraphrase"),
        ],
    ),
    "book": (
        "I'm reading {book} by {author} at the moment.",
        [
            ("Which book by {author} am I reading?", "lexical"),
            ("What novel sits on my nightstand lately?", "paraphrase"),
        ],
    ),
    "trip": (
        "I booked flights to {country} for a {trip} in {month}.",
        [
            ("Where did I book flights to?", "lexical"),
            ("Which destination is my upcoming holiday?", "paraphrase"),
            ("When did I book the {country} flights?", "temporal"),
            ("What are my plans for {country}?", "lexical"),
        ],
    ),
    "injury": (
        "I broke my {bone} skiing in {resort}.",
        [
            ("What did I break skiing?", "lexical"),
            ("Which part of my body got hurt on the slopes?", "paraphrase"),
            ("When did I break my {bone}?", "temporal"),
            ("What happened in {resort}?", "lexical"),
        ],
    ),
    "language": (
        "I'm learning {language} with an app every morning before breakfast.",
        [
            ("Which language am I learning?", "lexical"),
            ("What foreign tongue do I study daily?", "paraphrase"),
        ],
    ),
    "sibling": (
        "My sister {sister} is getting married in {wedding_month}.",
        [
            ("When is {sister} getting married?", "lexical"),
            ("Who is {sister}?", "lexical"),
            ("Is a family wedding coming up soon?", "paraphrase"),
            ("Does anyone close to me have a ceremony planned?", "paraphrase"),
        ],
    ),
    "diet": (
        "I stopped eating meat and went vegetarian after watching a documentary.",
        [
            ("Did I stop eating meat?", "lexical"),
            ("Should a dinner invitation for me include steak or chicken?", "paraphrase"),
        ],
    ),
    "garden": (
        "I planted {plants} in the backyard and they are finally sprouting.",
        [
            ("What did I plant in the backyard?", "lexical"),
            ("Which vegetables am I growing outside?", "paraphrase"),
        ],
    ),
}

# Facts that change: told once, then replaced in a later session. Only the latest counts.
CHANGES: dict[str, tuple[str, str, list[tuple[str, str]]]] = {
    "job": (
        "I work as a {job1} at {company1}.",
        "Big news: I just started a new role as a {job2} at {company2}!",
        [
            ("Where do I work now?", "changed"),
            ("What is my current position?", "changed"),
            ("What do I do at {company2}?", "lexical"),
        ],
    ),
    "home": (
        "We rent a small flat in {city1}.",
        "We finally moved to {city2} last week, the boxes are everywhere.",
        [("Which city do I live in now?", "changed"), ("How is life in {city2}?", "lexical")],
    ),
    "coffee": (
        "My usual order is a {drink1} every morning.",
        "These days I've switched to {drink2} instead of my old order.",
        [("What do I drink in the morning these days?", "changed")],
    ),
}

# What others do, with another person's values: near the fact in words and in meaning, but
# not about the user, so it answers nothing (as in real conversations).
OTHERS: dict[str, str] = {
    "pet": "My colleague just got a {pet} as well, it chews everything.",
    "instrument": "My cousin plays the {instrument} in an amateur orchestra.",
    "allergy": "My nephew can't have {allergen} either, so birthday parties are tricky.",
    "race": "My brother wants to run the {race} next year.",
    "car": "My neighbour drives a {car} and keeps bragging about it.",
    "book": "My book club picked {book} for next month, but I haven't started it.",
    "trip": "My parents went to {country} years ago and still talk about it.",
    "injury": "A friend of mine hurt her {bone} playing tennis.",
    "language": "My partner speaks fluent {language}.",
    "sibling": "My colleague {sister} is organising the office party.",
    "diet": "My dad loves a barbecue with plenty of sausages and ribs.",
    "garden": "The neighbours grow {plants} on their balcony.",
    "job": "My friend works as a {job1} at {company1}.",
    "home": "My best friend lives in {city1}.",
    "coffee": "My boss drinks {drink1} all day long.",
}

PEOPLE: list[dict[str, str]] = [
    {"name": "Maya", "pet": "border collie", "pet_name": "Pixel", "instrument": "cello",
     "allergen": "peanuts", "race": "Berlin half marathon", "race_time": "1 hour 52 minutes",
     "car": "Toyota Corolla", "book": "The Left Hand of Darkness", "author": "Ursula K. Le Guin",
     "country": "Japan", "trip": "two-week hiking tour", "month": "October", "bone": "wrist",
     "resort": "Zermatt", "language": "Portuguese", "sister": "Lena", "wedding_month": "June",
     "plants": "tomatoes and zucchini", "job1": "data analyst", "company1": "Globex",
     "job2": "product manager", "company2": "Initech", "city1": "Leeds", "city2": "Bristol",
     "drink1": "flat white", "drink2": "green tea"},
    {"name": "Omar", "pet": "tabby cat", "pet_name": "Biscuit", "instrument": "violin",
     "allergen": "shellfish", "race": "Chicago marathon", "race_time": "3 hours 41 minutes",
     "car": "Honda Civic", "book": "Dune", "author": "Frank Herbert", "country": "Portugal",
     "trip": "surfing week", "month": "August", "bone": "ankle", "resort": "Chamonix",
     "language": "Japanese", "sister": "Yasmin", "wedding_month": "September",
     "plants": "carrots and beans", "job1": "nurse", "company1": "St Mary's Hospital",
     "job2": "clinical researcher", "company2": "Novagen", "city1": "Manchester",
     "city2": "Edinburgh", "drink1": "double espresso", "drink2": "oat latte"},
    {"name": "Priya", "pet": "parrot", "pet_name": "Mango", "instrument": "piano",
     "allergen": "gluten", "race": "Paris 10K", "race_time": "48 minutes",
     "car": "Volkswagen Golf", "book": "Pachinko", "author": "Min Jin Lee", "country": "Peru",
     "trip": "trek to Machu Picchu", "month": "May", "bone": "collarbone", "resort": "Whistler",
     "language": "Italian", "sister": "Anjali", "wedding_month": "December",
     "plants": "peppers and lettuce", "job1": "architect", "company1": "Foster Studio",
     "job2": "urban planner", "company2": "the city council", "city1": "Toronto",
     "city2": "Vancouver", "drink1": "cappuccino", "drink2": "chai"},
    {"name": "Lukas", "pet": "golden retriever", "pet_name": "Sunny", "instrument": "drums",
     "allergen": "penicillin", "race": "Vienna marathon", "race_time": "4 hours 5 minutes",
     "car": "Skoda Octavia", "book": "The Name of the Wind", "author": "Patrick Rothfuss",
     "country": "Iceland", "trip": "road trip", "month": "July", "bone": "leg",
     "resort": "St. Anton", "language": "Spanish", "sister": "Greta", "wedding_month": "April",
     "plants": "potatoes and onions", "job1": "mechanic", "company1": "Autohaus Weber",
     "job2": "service manager", "company2": "Tesla", "city1": "Graz", "city2": "Munich",
     "drink1": "americano", "drink2": "decaf cappuccino"},
    {"name": "Sofia", "pet": "rabbit", "pet_name": "Clover", "instrument": "saxophone",
     "allergen": "cats", "race": "Rome half marathon", "race_time": "2 hours 3 minutes",
     "car": "Fiat 500", "book": "Circe", "author": "Madeline Miller", "country": "Greece",
     "trip": "island-hopping week", "month": "September", "bone": "thumb",
     "resort": "Cortina", "language": "German", "sister": "Chiara", "wedding_month": "August",
     "plants": "basil and strawberries", "job1": "teacher", "company1": "Liceo Galilei",
     "job2": "school principal", "company2": "Scuola Verdi", "city1": "Bologna",
     "city2": "Turin", "drink1": "macchiato", "drink2": "chamomile"},
    {"name": "Daniel", "pet": "corgi", "pet_name": "Waffles", "instrument": "trumpet",
     "allergen": "bee stings", "race": "London marathon", "race_time": "3 hours 58 minutes",
     "car": "Ford Focus", "book": "Project Hail Mary", "author": "Andy Weir",
     "country": "Canada", "trip": "canoe trip", "month": "June", "bone": "elbow",
     "resort": "Val d'Isère", "language": "French", "sister": "Hannah", "wedding_month": "May",
     "plants": "cucumbers and radishes", "job1": "software developer", "company1": "Acme Corp",
     "job2": "engineering lead", "company2": "Stripe", "city1": "Cardiff", "city2": "London",
     "drink1": "mocha", "drink2": "black coffee"},
    {"name": "Aiko", "pet": "hamster", "pet_name": "Mochi", "instrument": "guitar",
     "allergen": "eggs", "race": "Tokyo marathon", "race_time": "4 hours 20 minutes",
     "car": "Mazda 3", "book": "Norwegian Wood", "author": "Haruki Murakami",
     "country": "Norway", "trip": "fjord cruise", "month": "March", "bone": "rib",
     "resort": "Niseko", "language": "Korean", "sister": "Yuki", "wedding_month": "November",
     "plants": "spinach and kale", "job1": "translator", "company1": "Lingua Partners",
     "job2": "localisation manager", "company2": "Nintendo", "city1": "Osaka",
     "city2": "Kyoto", "drink1": "matcha latte", "drink2": "barley tea"},
    {"name": "Carlos", "pet": "beagle", "pet_name": "Taco", "instrument": "accordion",
     "allergen": "strawberries", "race": "Madrid 15K", "race_time": "1 hour 11 minutes",
     "car": "Seat Leon", "book": "One Hundred Years of Solitude",
     "author": "Gabriel García Márquez", "country": "Mexico", "trip": "family visit",
     "month": "December", "bone": "shoulder", "resort": "Baqueira", "language": "Dutch",
     "sister": "Lucía", "wedding_month": "July", "plants": "chillies and garlic",
     "job1": "chef", "company1": "Casa Lola", "job2": "restaurant owner",
     "company2": "his own bistro", "city1": "Seville", "city2": "Valencia",
     "drink1": "cortado", "drink2": "mint tea"},
    {"name": "Grace", "pet": "goldfish", "pet_name": "Bubbles", "instrument": "flute",
     "allergen": "sesame", "race": "Boston marathon", "race_time": "3 hours 30 minutes",
     "car": "Subaru Outback", "book": "Beloved", "author": "Toni Morrison",
     "country": "Kenya", "trip": "safari", "month": "January", "bone": "finger",
     "resort": "Aspen", "language": "Swahili", "sister": "Naomi", "wedding_month": "October",
     "plants": "pumpkins and squash", "job1": "accountant", "company1": "Deloitte",
     "job2": "finance director", "company2": "a biotech startup", "city1": "Boston",
     "city2": "Denver", "drink1": "latte", "drink2": "rooibos"},
    {"name": "Tom", "pet": "tortoise", "pet_name": "Sheldon", "instrument": "harmonica",
     "allergen": "dust mites", "race": "Dublin marathon", "race_time": "4 hours 47 minutes",
     "car": "Nissan Leaf", "book": "Wolf Hall", "author": "Hilary Mantel",
     "country": "Vietnam", "trip": "backpacking trip", "month": "February", "bone": "knee",
     "resort": "Verbier", "language": "Mandarin", "sister": "Ellie", "wedding_month": "March",
     "plants": "peas and broccoli", "job1": "electrician", "company1": "BrightSpark",
     "job2": "site supervisor", "company2": "Balfour Beatty", "city1": "Cork",
     "city2": "Galway", "drink1": "filter coffee", "drink2": "hot chocolate"},
]  # fmt: skip

SMALL_TALK = [
    "Work was pretty hectic today.",
    "The weather has been grey all week.",
    "I finally cleaned out the garage.",
    "Can you suggest something to cook tonight?",
    "I watched a great documentary last night.",
    "My neighbours are renovating again, it's so loud.",
    "I'm trying to get more sleep this month.",
    "We had friends over for dinner on Saturday.",
    "I need to renew my passport soon.",
    "Traffic this morning was terrible.",
    "I've been meaning to call my grandmother.",
    "The new season of that show starts tomorrow.",
]
# small talk made from parts, so a conversation has many distinct turns that answer nothing
_DOINGS = [
    "cleaned the kitchen",
    "went for a long walk",
    "tried a new recipe",
    "fixed the fence",
    "visited the market",
    "caught up on emails",
    "watched a film",
    "baked bread",
    "repainted the hallway",
    "sorted old photos",
    "had lunch with a colleague",
    "went to the dentist",
    "played board games",
    "took a nap",
    "did the laundry",
]
_WHENS = ["this morning", "yesterday", "after work", "on Saturday", "last night", "at lunch"]
_FEELINGS = ["It was nice.", "It took forever.", "Not bad at all.", "I'm exhausted now.", ""]

REPLIES = [
    "That sounds great, tell me more!",
    "Oh, how exciting. How do you feel about it?",
    "Thanks for sharing that with me.",
    "I'll remember that.",
    "That must have been quite something.",
    "Good to know! Anything I can help with?",
]

_STOP_WORDS = (
    "a an the and or but if of to in on at for with by from as is are was were be been am i "
    "me my we our you your it its this that these those do does did what which who when where "
    "how why is any anyone so up out about into over after before now lately soon every all "
    "have has had would could should will can get got getting made make there their them they "
    "he she his her here just than too very some"
)
_STOP = set(_STOP_WORDS.split())


def _stem(word: str) -> str:
    word = word.lower().strip("'’")
    for suffix in ("ing", "ed", "es", "s", "ly"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def content_words(text: str) -> set[str]:
    """The stems of a text's words, stop words left out (what "shares no word" is checked on)."""
    return {_stem(w) for w in re.findall(r"[\w']+", text.lower()) if w not in _STOP}


def _questions(kind: str) -> list[tuple[str, str]]:
    return KINDS[kind][1] if kind in KINDS else CHANGES[kind][2]


def _echo(statement: str) -> str:
    """The assistant repeating a statement back, in the second person."""
    text = re.sub(r"\bI'm\b", "you're", statement)
    text = re.sub(r"\bI've\b", "you've", text)
    text = re.sub(r"\bI\b", "you", text)
    text = re.sub(r"\b[Mm]y\b", "your", text)
    text = re.sub(r"\bWe\b", "you", text)
    return f"Got it, {text[0].lower()}{text[1:]}"


@dataclass
class _Turn:
    id: str
    speaker: str
    text: str


def _conversation(index: int, person: dict[str, str], rng: random.Random) -> dict[str, Any]:
    cid = f"c{index + 1:02d}"
    name = person["name"]
    # the stories, in the order they are told; a change's second half comes later
    stories: list[tuple[str, str, str]] = [(k, "fact", KINDS[k][0]) for k in KINDS]
    rng.shuffle(stories)
    changes = list(CHANGES)
    for k in changes:  # the first half early, the second in the last third
        stories.insert(rng.randrange(0, len(stories) // 3 + 1), (k, "old", CHANGES[k][0]))
    for k in changes:
        stories.insert(
            rng.randrange(2 * len(stories) // 3, len(stories) + 1), (k, "new", CHANGES[k][1])
        )
    others = [p for p in PEOPLE if p is not person]
    for k, template in OTHERS.items():
        stories.insert(rng.randrange(len(stories) + 1), (k, "other", template))
    per_session = 3
    start = datetime(2025, 1, 6, 18, 30, tzinfo=UTC) + timedelta(days=3 * index)
    sessions: list[dict[str, Any]] = []
    said: dict[tuple[str, str], str] = {}  # (kind, part) -> turn id
    when = start
    for s, first in enumerate(range(0, len(stories), per_session)):
        sid = f"{cid}-s{s + 1:02d}"
        turns: list[_Turn] = []

        def add(speaker: str, text: str, sid: str = sid, turns: list[_Turn] = turns) -> str:
            turn = _Turn(f"{sid}-t{len(turns) + 1:02d}", speaker, text)
            turns.append(turn)
            return turn.id

        add(name, rng.choice(["Hi!", "Hey, it's me again.", "Good evening!", "Hello there."]))
        add("Assistant", rng.choice(["Hi! Good to hear from you.", "Hello! How have you been?"]))
        for kind, part, template in stories[first : first + per_session]:
            for _ in range(rng.randint(1, 4)):
                chat = rng.choice(
                    [
                        rng.choice(SMALL_TALK),
                        f"I {rng.choice(_DOINGS)} {rng.choice(_WHENS)}. {rng.choice(_FEELINGS)}",
                    ]
                ).strip()
                add(name, chat)
                add("Assistant", rng.choice(REPLIES))
            if part == "other":
                add(name, template.format(**rng.choice(others)))
                add("Assistant", rng.choice(REPLIES))
                continue
            statement = template.format(**person)
            # most of the time the fact comes inside a longer message, as people talk
            # (asides that share no word with the questions, so a paraphrase stays one)
            asked_words = set().union(
                *(content_words(q.format(**person)) for q, _ in _questions(kind))
            )
            asides = [t for t in SMALL_TALK if not content_words(t) & asked_words]
            aside, aside2 = rng.choice(asides), rng.choice(asides)
            text = rng.choice(
                [
                    statement,
                    f"{aside} {statement}",
                    f"{statement} {aside}",
                    f"{aside} {statement} {aside2}",
                ]
            )
            said[(kind, part)] = add(name, text)
            # the reply echoes the fact's words: a distractor for full text
            add("Assistant", _echo(statement))
        add(name, rng.choice(["Thanks, talk soon.", "That's all for today.", "Bye for now!"]))
        sessions.append(
            {
                "id": sid,
                "date": when.isoformat(),
                "turns": [{"id": t.id, "speaker": t.speaker, "text": t.text} for t in turns],
            }
        )
        when += timedelta(days=rng.randint(6, 16), hours=rng.randint(-3, 3))
    last = datetime.fromisoformat(sessions[-1]["date"])
    asked = last.date() + timedelta(days=1)
    questions: list[dict[str, Any]] = []

    def ask(text: str, category: str, answer: str, superseded: str | None = None) -> None:
        questions.append(
            {
                "id": f"{cid}-q{len(questions) + 1:02d}",
                "question": text.format(**person),
                "answers": [answer],
                "category": category,
                "asked": asked.isoformat(),
                **({"superseded": [superseded]} if superseded else {}),
            }
        )

    for kind, (statement, asks) in KINDS.items():
        for text, category in asks:
            shared = content_words(text.format(**person)) & content_words(
                statement.format(**person)
            )
            if category == "paraphrase" and shared:
                raise ValueError(f"paraphrase {text!r} shares {shared} with {statement!r}")
            if category == "lexical" and not shared:
                raise ValueError(f"lexical {text!r} shares no word with {statement!r}")
            ask(text, category, said[(kind, "fact")])
    for kind, (_, _, asks) in CHANGES.items():
        for text, category in asks:
            # what the answer used to be: inject must not give it back as current
            old = said[(kind, "old")] if category == "changed" else None
            ask(text, category, said[(kind, "new")], old)
    return {
        "id": cid,
        "user": name,
        "sessions": sessions,
        "questions": questions,
    }


def conversations(seed: int = 20261201) -> Iterator[dict[str, Any]]:
    """The set, one conversation (a line of the JSON Lines format) at a time."""
    rng = random.Random(seed)
    for index, person in enumerate(PEOPLE):
        yield _conversation(index, person, rng)


def write(path: Path) -> Path:
    """The set as a JSON Lines file (``python -m benchmarks.recall --write-dataset FILE``)."""
    with path.open("w", encoding="utf-8") as out:
        for conversation in conversations():
            out.write(json.dumps(conversation, ensure_ascii=False) + "\n")
    return path
