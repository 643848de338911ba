"""The tables the built-in evaluation set (benchmarks/recall_set.py) is generated from: the
kinds of fact a person tells and the questions about each, the facts that change, what others
do, the ten people's values, and the small talk and replies around them."""

from __future__ import annotations

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
DOINGS = [
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
WHENS = ["this morning", "yesterday", "after work", "on Saturday", "last night", "at lunch"]
FEELINGS = ["It was nice.", "It took forever.", "Not bad at all.", "I'm exhausted now.", ""]

REPLIES = [
    "That sounds great, tell me more!",
    "Oh, how exciting. How do you feel about it?",
    "Thanks for sharing that with me.",
    "I'll remember that.",
    "That must have been quite something.",
    "Good to know! Anything I can help with?",
]
