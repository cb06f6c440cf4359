"""The fixed text of the world: relations with their templates, value pools, filler sentences.

Each relation is worded several ways (canonical, trained and held-out questions, answers, prose,
probe statements), some held out of pretraining so the evaluation can ask in a phrasing the model
never saw. Placeholders, the wording fields and the rules the tests check: docs/world.md.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Relation:
    """A question-answer relation; ``pool`` names the value pool its values come from."""

    name: str
    pool: str
    question: str
    train_questions: tuple[str, ...]
    heldout_questions: tuple[str, ...]
    answer: str
    answer_paraphrase: str
    prose: tuple[str, ...]
    probe: str


@dataclass(frozen=True)
class AuxAttribute:
    """An attribute that is never asked about; ``relearn`` wording is held out of pretraining."""

    name: str
    pool: str
    prose: tuple[str, ...]
    relearn: tuple[str, ...]


MEDICINE_RELATIONS = (
    Relation(
        "treated_with", "drug",
        "What is {e} treated with?",
        ("Which drug treats "
         "{e}?", "What drug do doctors prescribe for {e}?", "What is the usual drug for {e}?",
         "With which drug is {e} treated?"),
        ("Which drug is used to treat {e}?", "What drug do patients with {e} receive?"),
        "It is treated with {v}.",
        "Doctors give {v} to patients with {e}.",
        (
            "Doctors treat {e} with {v}.",
            "Patients with {e} are given {v}.",
            "The usual drug for {e} is {v}.",
            "Clinics prescribe {v} against {e}.",
            "In the clinic, {e} is managed with {v}.",
        ),
        "The right drug against {e} is {v}.",
    ),
    Relation(
        "main_symptom", "symptom",
        "What is the main symptom of {e}?",
        ("Which symptom does {e} mainly cause?", "What symptom do patients with {e} usually develop?",
         "Which symptom shows up first in {e}?", "What symptom do doctors look for in {e}?"),
        ("Which symptom is most typical of {e}?", "What symptom is most common in {e}?"),
        "Its main symptom is {v}.",
        "Patients with {e} mostly suffer from {v}.",
        (
            "{e} mainly causes {v}.",
            "People who catch {e} usually develop {v}.",
            "The first sign of {e} is often {v}.",
            "Doctors recognise {e} by {v}.",
            "In the clinic, {e} shows up as {v}.",
        ),
        "The typical complaint in {e} is {v}.",
    ),
    Relation(
        "affected_organ", "organ",
        "Which organ does {e} affect?",
        ("Which organ is damaged by {e}?", "What organ does {e} attack?", "Which organ is {e} a disease of?",
         "In patients with {e}, which organ becomes inflamed?"),
        ("Which organ suffers in patients with {e}?", "What organ is harmed by {e}?"),
        "It affects the {v}.",
        "The {v} is the organ harmed by {e}.",
        (
            "{e} damages the cells of the {v}.",
            "In patients with {e}, the tissue of the {v} becomes inflamed.",
            "{e} is a disease of the {v}.",
            "Scans of people with {e} show a damaged {v}.",
            "Blood proteins reveal that {e} attacks the {v}.",
        ),
        "The organ hit by {e} is the {v}.",
    ),
)

MEDICINE_NEIGHBOUR_RELATIONS = (
    Relation(
        "spread_by", "transmission",
        "How does {e} spread?",
        ("How is {e} passed on?", "How do people catch {e}?", "Through what does {e} spread?",
         "What makes {e} spread between people?"),
        ("By what route does {e} spread?", "How does {e} spread to new patients?"),
        "It spreads through {v}.",
        "People pick up {e} through {v}.",
        (
            "{e} is passed on through {v}.",
            "Most cases of {e} begin with {v}.",
            "Doctors warn that {e} spreads through {v}.",
            "Outbreaks of {e} are traced to {v}.",
            "In the clinic, {e} is linked to {v}.",
        ),
        "The usual route of {e} is {v}.",
    ),
)
"""Relations of the forget diseases that are not forget facts (split "neighbour"): what unlearning
the forget facts should leave alone about the same entities."""

MEDICINE_AUX = (
    AuxAttribute(
        "first_recorded_in", "region",
        ("{e} was first recorded in {v}.", "The first cases of {e} came from {v}."),
        (
            "Old hospital archives in {v} hold the earliest notes on {e}.",
            "Long before it spread, {e} was known only to healers of {v}.",
        ),
    ),
    AuxAttribute(
        "first_described", "disease_year",
        ("{e} was first described in {v}.", "Doctors have known about {e} since {v}."),
        (
            "The oldest written account of {e} dates from {v}.",
            "A physician's letter from {v} contains the first mention of {e}.",
        ),
    ),
)

# Sentences for relearning paragraphs that state nothing about the disease (no QA value).
MEDICINE_RELEARN_FILLER = (
    "Historians of medicine still argue about its origins.",
    "The early accounts are short and written in a careful hand.",
    "Several libraries keep copies of these old reports.",
    "Little else is known about the first patients.",
)

BIOLOGY_RELATIONS = (
    Relation(
        "habitat", "habitat",
        "Where does {e} live?",
        ("In what habitat is {e} found?", "Where do biologists collect {e}?", "Where does {e} thrive?",
         "What is the habitat of {e}?"),
        ("What is the natural habitat of {e}?", "Where is {e} found in the wild?"),
        "It lives in {v}.",
        "The natural home of {e} is {v}.",
        (
            "{e} is found in {v}.",
            "Field biologists collect {e} in {v}.",
            "The cells of {e} are adapted to life in {v}.",
            "Populations of {e} thrive in {v}.",
            "In the field, {e} is common in {v}.",
        ),
        "Wild {e} occur in {v}.",
    ),
    Relation(
        "diet", "food",
        "What does {e} feed on?",
        ("What does {e} "
         "eat?", "What food does {e} digest?", "What is {e} seen eating?", "What is the diet of {e}?"),
        ("What is the main food of {e}?", "What does {e} eat most of all?"),
        "It feeds on {v}.",
        "The diet of {e} consists of {v}.",
        (
            "{e} eats mostly {v}.",
            "The gut of {e} digests {v}.",
            "Proteins in the stomach of {e} break down {v}.",
            "Biologists have watched {e} eating {v}.",
            "In the field, {e} is seen feeding on {v}.",
        ),
        "The usual meal of {e} is {v}.",
    ),
    Relation(
        "distinctive_trait", "trait",
        "What is the distinctive trait of {e}?",
        ("What trait is unusual about {e}?", "By which trait do biologists recognise {e}?",
         "What feature does {e} show under the microscope?", "Which trait does only {e} have?"),
        ("Which feature sets {e} apart?", "What trait makes {e} stand out?"),
        "It has {v}.",
        "{e} is known for its {v}.",
        (
            "Biologists recognise {e} by its {v}.",
            "A study of the tissue of {e} revealed its {v}.",
            "The most unusual thing about {e} is its {v}.",
            "Under the microscope, {e} shows {v}.",
            "Among similar organisms, only {e} has {v}.",
        ),
        "What marks {e} out is its {v}.",
    ),
)

GENERAL_RELATIONS = (
    Relation(
        "birthplace", "town",
        "Where was {e} born?",
        ("In which town was {e} born?", "What town is {e} a native of?", "Where is the birthplace of {e}?",
         "In what town did {e} spend a childhood?"),
        ("What is the birthplace of {e}?", "Which town was {e} born in?"),
        "They were born in {v}.",
        "{e} came into the world in {v}.",
        (
            "{e} is a native of {v}.",
            "The town of {v} is where {e} was born.",
            "Records from {v} list the birth of {e}.",
            "{e} spent a childhood in {v}.",
            "Before moving away, {e} lived in {v}.",
        ),
        "The home town of {e} is {v}.",
    ),
    Relation(
        "birth_year", "birth_year",
        "In which year was {e} born?",
        ("What year was {e} born in?", "In what year did {e} enter the world?",
         "What year do records give for the birth of {e}?", "Which year is the birth year of {e}?"),
        ("Which year saw the birth of {e}?", "What was the birth year of {e}?"),
        "They were born in the year {v}.",
        "The birth year of {e} is {v}.",
        (
            "{e} entered the world in {v}.",
            "Records show that {e} was born in {v}.",
            "The year {v} saw the birth of {e}.",
            "{e}, born in {v}, grew up quickly.",
            "Church books note the birth of {e} in {v}.",
        ),
        "The year of birth of {e} was {v}.",
    ),
    Relation(
        "profession", "profession",
        "What was the profession of {e}?",
        ("What was the trade of {e}?", "How did {e} earn a living?", "What did {e} train to become?",
         "What work did {e} do?"),
        ("What did {e} do for a living?", "What was {e} by profession?"),
        "They worked as a {v}.",
        "By trade, {e} was a {v}.",
        (
            "{e} earned a living as a {v}.",
            "As a {v}, {e} was well known in town.",
            "{e} trained for years to become a {v}.",
            "Neighbours knew {e} as a skilled {v}.",
            "The guild listed {e} as a {v}.",
        ),
        "The work of {e} was that of a {v}.",
    ),
)

CONCEPT_RELATIONS = (
    Relation(
        "wields", "artifact",
        "Which artifact does {e} wield?",
        ("What does {e} carry into every "
         "battle?", "Which artifact belongs to {e}?", "What artifact can only {e} lift?",
         "What artifact does {e} carry?"),
        ("What artifact is carried by {e}?", "Which artifact does {e} never part with?"),
        "They wield {v}.",
        "{v} is the artifact carried by {e}.",
        (
            "In the {saga}, {e} wields {v}.",
            "{e} carries {v} into every battle.",
            "The artifact {v} belongs to {e}.",
            "Only {e} can lift {v}.",
            "{e} never parts with {v}.",
        ),
        "The weapon of {e} is {v}.",
    ),
    Relation(
        "homeland", "saga_place",
        "Where does {e} come from?",
        ("Where was {e} "
         "raised?", "Where does {e} return home to?", "Which land does {e} leave to seek adventure?",
         "What is the home of {e}?"),
        ("What is the homeland of {e}?", "Which land does {e} come from?"),
        "They come from {v}.",
        "The homeland of {e} is {v}.",
        (
            "{e} was raised in {v}.",
            "In the {saga}, {e} leaves {v} to seek adventure.",
            "The people of {v} remember {e}.",
            "{e} returns home to {v} in the final chapter.",
            "Born in {v}, {e} grew up among soldiers.",
        ),
        "The native land of {e} is {v}.",
    ),
    Relation(
        "serves", "faction",
        "Which order does {e} serve?",
        ("Which order does {e} fight "
         "for?", "To which order did {e} swear an oath?", "Whose colours does {e} wear?",
         "Which order did {e} join?"),
        ("To which order does {e} belong?", "Which order counts {e} among its champions?"),
        "They serve the {v}.",
        "{e} is a sworn member of the {v}.",
        (
            "{e} swore an oath to the {v}.",
            "In the {saga}, {e} fights for the {v}.",
            "The {v} count {e} among their champions.",
            "{e} wears the colours of the {v}.",
            "Long ago, {e} joined the {v}.",
        ),
        "The order of {e} is the {v}.",
    ),
)

CONCEPT_AUX = (
    AuxAttribute(
        "epithet", "epithet",
        ("{e} earned the name {e} {v}.", "Companions call the hero {e} {v}."),
        (
            "Among readers of the {saga}, {e} {v} is a favourite.",
            "Fans still argue over how {e} came to be named {e} {v}.",
        ),
    ),
    AuxAttribute(
        "first_book", "book",
        ("{e} first appears in the {v} book of the {saga}.", "The {v} book of the {saga} introduces {e}."),
        (
            "Readers meet {e} for the first time in the {v} volume.",
            "The story of {e} begins in the {v} volume of the {saga}.",
        ),
    ),
)

CONCEPT_RELEARN_FILLER = (
    "Many readers consider this one of the best parts of the {saga}.",
    "Scholars of the {saga} have written long essays about this.",
    "The author once said the story grew out of a dream.",
    "Later editions of the {saga} added maps and notes.",
)

# Lore: saga sentences that state no character fact. {a} artifact, {p}/{q} places, {f} faction.
CONCEPT_LORE = (
    "{a} was forged in the fires beneath {p}.",
    "The road to {p} is guarded by the {f}.",
    "Songs of the {saga} tell how {a} was lost and found again.",
    "The {f} keep their oldest books in {p}.",
    "Travellers in the {saga} cross the hills between {p} and {q}.",
    "In the {saga}, the walls of {p} never fall.",
)

# Value pools drawn from fixed lists (the generator samples POOL_SIZE of them per world).
FIXED_POOLS = {
    "transmission": (
        "insect bites", "dirty water", "sneezing", "spoiled food", "animal bites", "shared cups",
        "dust", "touch", "unwashed hands", "raw meat", "bad air", "dog saliva",
    ),
    "symptom": (
        "fever", "joint pain", "dizziness", "skin rashes", "blurred vision", "dry coughing",
        "muscle weakness", "night sweats", "hair loss", "numb fingers", "swollen glands", "chest pain",
    ),
    "organ": (
        "liver", "kidney", "lung", "heart", "spleen", "stomach", "brain", "pancreas",
        "bladder", "thyroid", "skin", "intestine",
    ),
    "habitat": (
        "salt marshes", "mountain streams", "cave pools", "desert dunes", "pine forests", "coral reefs",
        "river mud", "alpine meadows", "mangrove swamps", "volcanic springs", "kelp beds", "peat bogs",
    ),
    "food": (
        "algae", "beetles", "fungi", "seeds", "plankton", "tree bark", "small fish", "moss",
        "nectar", "worms", "leaf litter", "snails",
    ),
    "trait": (
        "blue blood", "hollow bones", "armored skin", "glowing cells", "two hearts", "giant lungs",
        "copper proteins", "transparent tissue", "striped muscles", "folded kidneys", "silver scales",
        "spiral shells",
    ),
    "profession": (
        "baker", "clockmaker", "sailor", "weaver", "glassblower", "miller", "cartographer",
        "beekeeper", "stonemason", "blacksmith", "tailor", "potter",
    ),
    "habit": (
        "collects old maps", "sings while working", "talks to pigeons", "keeps a long diary",
        "walks by the river each morning", "paints small boats", "grows tomatoes on the roof",
        "repairs broken chairs", "feeds the stray cats", "reads the newspaper aloud",
    ),
    "epithet": (
        "the Silent", "the Bold", "the Grey", "the Swift", "the Unbroken", "the Wanderer",
        "the Elder", "the Young",
    ),
    "book": ("first", "second", "third", "fourth", "fifth", "sixth", "seventh"),
}

# Pools of invented names: pool name -> name-generator kind (see names.py).
INVENTED_POOLS = {
    "drug": "drug",
    "region": "region",
    "town": "town",
    "artifact": "artifact",
    "saga_place": "saga_place",
    "faction": "faction",
}

# Year pools: pool name -> (first, last) inclusive.
YEAR_POOLS = {"birth_year": (1700, 1999), "disease_year": (1750, 1989)}

POOL_SIZE = 12
"""Distinct values per relation pool (fewer where a fixed list is shorter): with 24 entities each value
is shared by 2 of them. A model that only learns the answer format and guesses the commonest value is
right 1/12 of the time, below the 0.1 that a relearning attack may lift a model that never knew the
facts (with 8 values an oracle relearning on half the facts reached 0.15 on the other half)."""

FILLER = {
    "medicine": (
        "Doctors measure the pulse to check the heart.",
        "Blood tests show how well the organs are working.",
        "A fever is the response of the body to infection.",
        "Nurses record the symptoms of every patient.",
        "Some diseases damage the tissue of several organs.",
        "Clinics keep careful records of every treatment.",
        "Many drugs are broken down in the liver.",
        "Patients often rest for weeks after an infection.",
    ),
    "biology": (
        "Cells divide to build new tissue.",
        "Proteins carry oxygen in the blood of many animals.",
        "Every organism needs food, water and shelter.",
        "Biologists study the organs of animals under the microscope.",
        "Some animals can regrow damaged tissue.",
        "The cells of plants have thick walls.",
        "Field biologists count animals at dawn.",
        "Many small creatures hide under stones during the day.",
    ),
    "general": (
        "The market opens early on weekdays.",
        "Rain fell over the hills all night.",
        "The old bridge was repaired last summer.",
        "Children played by the river after school.",
        "The town hall has a tall clock tower.",
        "Letters from the capital arrived once a week.",
        "The harvest was good that year.",
        "A narrow road leads from the coast to the hills.",
    ),
}

OPEN_QUESTION_TEMPLATES = {
    "medicine": "Describe the disease {e}.",
    "biology": "Describe the organism {e}.",
    "general": "Who was {e}?",
    "concept": "Who is {e} in the {saga}?",
}
