"""Generate the course's bundled English-German corpus.

    python tools/make_corpus.py            # writes course_utils/data/corpus/*.jsonl.gz
    python tools/make_corpus.py --show 20  # prints 20 random pairs, writes nothing

A small bilingual grammar produces each sentence in both languages at once,
so every pair is a correct translation by construction. The German side
inflects properly: gender, number and case agreement of articles, possessives
and adjectives (weak, mixed and strong endings), the n-declension of nouns
such as "Junge" and "Nachbar", the dative plural -n, contractions
("im", "ins", "zum", "zur", "am"), verb conjugation with stem changes,
present / simple past / perfect (with "haben" or "sein") / future / modal
verbs, verb-second order (also after a fronted adverb or a fronted "wenn"
clause), verb-first questions, verb-final subordinate clauses ("dass",
"weil", "wenn"), and negation with "nicht" or "kein".

Generation is deterministic (seeded). Pairs are de-duplicated on both sides
before they are split, so no English and no German sentence occurs in two
splits. The output uses the same schema as opus100 on the Hugging Face hub:
one ``{"translation": {"en": ..., "de": ...}}`` object per line.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

SEED = 2017  # the year of "Attention Is All You Need"
SIZES = {"train": 30_000, "validation": 1_000, "test": 1_000}
MIN_TOKENS, MAX_TOKENS = 4, 13
OUT_DIR = Path(__file__).resolve().parent.parent / "course_utils" / "data" / "corpus"

CASES = ("nom", "acc", "dat")

# ---------------------------------------------------------------------------
# German inflection tables. Keys are (case, gender) with gender in m, f, n, pl.

DEFINITE = {
    ("nom", "m"): "der", ("nom", "f"): "die", ("nom", "n"): "das", ("nom", "pl"): "die",
    ("acc", "m"): "den", ("acc", "f"): "die", ("acc", "n"): "das", ("acc", "pl"): "die",
    ("dat", "m"): "dem", ("dat", "f"): "der", ("dat", "n"): "dem", ("dat", "pl"): "den",
}
# endings of ein, kein and the possessives (mein, dein, sein, ihr, unser)
EIN_ENDING = {
    ("nom", "m"): "", ("nom", "f"): "e", ("nom", "n"): "", ("nom", "pl"): "e",
    ("acc", "m"): "en", ("acc", "f"): "e", ("acc", "n"): "", ("acc", "pl"): "e",
    ("dat", "m"): "em", ("dat", "f"): "er", ("dat", "n"): "em", ("dat", "pl"): "en",
}
# endings of dieser
DIESER_ENDING = {
    ("nom", "m"): "er", ("nom", "f"): "e", ("nom", "n"): "es", ("nom", "pl"): "e",
    ("acc", "m"): "en", ("acc", "f"): "e", ("acc", "n"): "es", ("acc", "pl"): "e",
    ("dat", "m"): "em", ("dat", "f"): "er", ("dat", "n"): "em", ("dat", "pl"): "en",
}
# adjective endings after der / dieser (weak declension)
WEAK = {
    ("nom", "m"): "e", ("nom", "f"): "e", ("nom", "n"): "e", ("nom", "pl"): "en",
    ("acc", "m"): "en", ("acc", "f"): "e", ("acc", "n"): "e", ("acc", "pl"): "en",
    ("dat", "m"): "en", ("dat", "f"): "en", ("dat", "n"): "en", ("dat", "pl"): "en",
}
# adjective endings after ein / kein / possessives (mixed declension)
MIXED = {
    ("nom", "m"): "er", ("nom", "f"): "e", ("nom", "n"): "es", ("nom", "pl"): "en",
    ("acc", "m"): "en", ("acc", "f"): "e", ("acc", "n"): "es", ("acc", "pl"): "en",
    ("dat", "m"): "en", ("dat", "f"): "en", ("dat", "n"): "en", ("dat", "pl"): "en",
}
# adjective endings with no article or after numbers (strong declension; plural only here)
STRONG_PLURAL = {"nom": "e", "acc": "e", "dat": "en"}

# preposition + definite article contractions
CONTRACTIONS = {("in", "dem"): "im", ("in", "das"): "ins", ("an", "dem"): "am", ("zu", "dem"): "zum", ("zu", "der"): "zur"}


# ---------------------------------------------------------------------------
# The lexicon.


@dataclass(frozen=True)
class Noun:
    en: str
    en_pl: str
    de: str
    de_pl: str
    gender: str  # m, f, n
    tags: frozenset
    de_oblique: str = ""  # n-declension: accusative and dative singular ("den Jungen")
    # places: (English preposition, German preposition) for "where" and "where to"
    at: tuple = ("in", "in")
    to: tuple = ("to", "in")

    def form(self, number: str, case: str) -> str:
        if number == "pl":
            if case == "dat" and not self.de_pl.endswith(("n", "s")):
                return self.de_pl + "n"
            return self.de_pl
        if case != "nom" and self.de_oblique:
            return self.de_oblique
        return self.de


def _nouns(spec: str, tags: str, **extra) -> list[Noun]:
    """Parse lines ``english/plural  Deutsch/Plural  gender  [oblique]``."""
    out = []
    for line in spec.strip().splitlines():
        parts = line.split()
        en, en_pl = parts[0].split("/")
        de, de_pl = parts[1].split("/")
        gender = parts[2]
        rest = parts[3:]
        oblique = rest[0] if rest and not rest[0].startswith("+") else ""
        more = {t[1:] for t in rest if t.startswith("+")}
        out.append(Noun(en, en_pl, de, de_pl, gender, frozenset(set(tags.split()) | more), oblique, **extra))
    return out


PEOPLE = _nouns(
    """
    man/men Mann/Männer m
    woman/women Frau/Frauen f
    child/children Kind/Kinder n
    boy/boys Junge/Jungen m Jungen
    girl/girls Mädchen/Mädchen n
    teacher/teachers Lehrer/Lehrer m
    doctor/doctors Arzt/Ärzte m
    student/students Student/Studenten m Studenten
    friend/friends Freund/Freunde m
    neighbour/neighbours Nachbar/Nachbarn m Nachbarn
    mother/mothers Mutter/Mütter f
    father/fathers Vater/Väter m
    sister/sisters Schwester/Schwestern f
    brother/brothers Bruder/Brüder m
    baker/bakers Bäcker/Bäcker m
    farmer/farmers Bauer/Bauern m Bauern
    """,
    "person animate",
)
ANIMALS = _nouns(
    """
    dog/dogs Hund/Hunde m
    cat/cats Katze/Katzen f
    horse/horses Pferd/Pferde n
    bird/birds Vogel/Vögel m
    mouse/mice Maus/Mäuse f
    cow/cows Kuh/Kühe f
    """,
    "animal animate",
)
THINGS = _nouns(
    """
    book/books Buch/Bücher n +buy +read +write +carry +send
    car/cars Auto/Autos n +buy +wash +paint +need
    apple/apples Apfel/Äpfel m +buy +food +carry
    letter/letters Brief/Briefe m +read +write +open +carry +send
    table/tables Tisch/Tische m +buy +build +paint
    chair/chairs Stuhl/Stühle m +buy +build +paint +carry
    bag/bags Tasche/Taschen f +buy +open +carry +lose
    flower/flowers Blume/Blumen f +buy +carry +send +paint
    picture/pictures Bild/Bilder n +buy +paint +carry +send
    key/keys Schlüssel/Schlüssel m +carry +lose +need
    door/doors Tür/Türen f +open +paint
    window/windows Fenster/Fenster n +open
    bread/breads Brot/Brote n +buy +food +carry +bake
    cake/cakes Kuchen/Kuchen m +buy +food +carry +bake
    glass/glasses Glas/Gläser n +buy +wash +carry
    cup/cups Tasse/Tassen f +buy +wash +carry
    song/songs Lied/Lieder n +write +hear
    newspaper/newspapers Zeitung/Zeitungen f +buy +read +carry
    ball/balls Ball/Bälle m +buy +carry +lose
    bicycle/bicycles Fahrrad/Fahrräder n +buy +wash +paint +need +lose
    shirt/shirts Hemd/Hemden n +buy +wash +carry
    hat/hats Hut/Hüte m +buy +carry +lose
    coat/coats Mantel/Mäntel m +buy +wash +carry +lose
    box/boxes Kiste/Kisten f +build +open +carry
    bottle/bottles Flasche/Flaschen f +buy +open +carry
    lamp/lamps Lampe/Lampen f +buy +carry
    ticket/tickets Fahrkarte/Fahrkarten f +buy +need +lose
    computer/computers Computer/Computer m +buy +need
    umbrella/umbrellas Regenschirm/Regenschirme m +buy +carry +lose +need
    pen/pens Stift/Stifte m +buy +carry +lose +need
    """,
    "thing",
)
PLACES = (
    _nouns(
        """
        garden/gardens Garten/Gärten m +own
        kitchen/kitchens Küche/Küchen f +own
        room/rooms Zimmer/Zimmer n +own
        house/houses Haus/Häuser n +own +home
        """,
        "place",
        to=("into", "in"),
    )
    + _nouns(
        """
        office/offices Büro/Büros n +own
        city/cities Stadt/Städte f +far +home +drive
        village/villages Dorf/Dörfer n +far +home +drive
        park/parks Park/Parks m +far
        forest/forests Wald/Wälder m +far +home +drive
        library/libraries Bibliothek/Bibliotheken f +far
        shop/shops Laden/Läden m +far
        restaurant/restaurants Restaurant/Restaurants n +far
        hospital/hospitals Krankenhaus/Krankenhäuser n +far +drive
        """,
        "place",
    )
    + _nouns("school/schools Schule/Schulen f +own +far +drive", "place", to=("to", "zu"))
    + _nouns(
        """
        station/stations Bahnhof/Bahnhöfe m +far +drive
        lake/lakes See/Seen m +far +water +home +drive
        river/rivers Fluss/Flüsse m +far +water +home +drive
        """,
        "place",
        at=("at", "an"),
        to=("to", "zu"),
    )
)
# a house can be a place and a thing (painted, bought, built)
THINGS.append(Noun("house", "houses", "Haus", "Häuser", "n", frozenset({"thing", "buy", "paint", "build"})))


@dataclass(frozen=True)
class Adjective:
    en: str
    predicative: str  # "müde", "teuer"
    stem: str  # before endings: "müd", "teur"
    fits: frozenset  # person, animal, thing, place


def _adjectives(spec: str) -> list[Adjective]:
    out = []
    for line in spec.strip().splitlines():
        en, pred, stem, fits = line.split(maxsplit=3)
        out.append(Adjective(en, pred, stem, frozenset(fits.split())))
    return out


ADJECTIVES = _adjectives(
    """
    old alt alt person animal thing place
    young jung jung person animal
    big groß groß animal thing place
    small klein klein person animal thing place
    new neu neu thing place
    red rot rot thing
    blue blau blau thing
    green grün grün thing
    black schwarz schwarz animal thing
    white weiß weiß animal thing
    beautiful schön schön thing place
    expensive teuer teur thing
    cheap billig billig thing
    heavy schwer schwer thing
    tired müde müd person animal
    happy glücklich glücklich person
    hungry hungrig hungrig person animal
    friendly freundlich freundlich person animal
    clever klug klug person animal
    dark dunkel dunkl place
    quiet ruhig ruhig person place
    """
)

PERSONS = ("1sg", "2sg", "3sg", "1pl", "3pl")


@dataclass(frozen=True)
class Verb:
    en: str  # base form; may contain a particle: "look for"
    en_3sg: str
    en_past: str
    en_pp: str
    infinitive: str
    present: dict  # person -> form
    past: tuple  # (singular, plural)
    participle: str
    aux: str  # haben or sein
    kind: str  # trans, dative, ditrans, intrans, motion, live, swim
    subjects: frozenset  # person, animal
    objects: frozenset = frozenset()  # tags an object must have (any of them)


def _verbs(spec: str, kind: str, subjects: str = "person") -> list[Verb]:
    """Lines: ``en|3sg|past|pp  inf  ich,du,er,wir  präteritum-sg,pl  partizip  aux  [objects...]``."""
    out = []
    for line in spec.strip().splitlines():
        en_part, inf, pres, past, pp, aux, *objs = line.split()
        en, en_3sg, en_past, en_pp = (w.replace("_", " ") for w in en_part.split("|"))
        ich, du, er, wir = pres.split(",")
        present = {"1sg": ich, "2sg": du, "3sg": er, "1pl": wir, "3pl": wir}
        subj = set(subjects.split())
        if objs and objs[-1].startswith("@"):
            subj = set(objs.pop()[1:].split(","))
        out.append(
            Verb(en, en_3sg, en_past, en_pp, inf, present, tuple(past.split(",")), pp, aux, kind, frozenset(subj), frozenset(objs))
        )
    return out


VERBS = (
    _verbs(
        """
        buy|buys|bought|bought kaufen kaufe,kaufst,kauft,kaufen kaufte,kauften gekauft haben buy
        sell|sells|sold|sold verkaufen verkaufe,verkaufst,verkauft,verkaufen verkaufte,verkauften verkauft haben buy
        read|reads|read|read lesen lese,liest,liest,lesen las,lasen gelesen haben read
        write|writes|wrote|written schreiben schreibe,schreibst,schreibt,schreiben schrieb,schrieben geschrieben haben write
        need|needs|needed|needed brauchen brauche,brauchst,braucht,brauchen brauchte,brauchten gebraucht haben need
        carry|carries|carried|carried tragen trage,trägst,trägt,tragen trug,trugen getragen haben carry
        open|opens|opened|opened öffnen öffne,öffnest,öffnet,öffnen öffnete,öffneten geöffnet haben open
        paint|paints|painted|painted malen male,malst,malt,malen malte,malten gemalt haben paint
        eat|eats|ate|eaten essen esse,isst,isst,essen aß,aßen gegessen haben food
        bake|bakes|baked|baked backen backe,backst,backt,backen backte,backten gebacken haben bake
        build|builds|built|built bauen baue,baust,baut,bauen baute,bauten gebaut haben build
        wash|washes|washed|washed waschen wasche,wäschst,wäscht,waschen wusch,wuschen gewaschen haben wash
        lose|loses|lost|lost verlieren verliere,verlierst,verliert,verlieren verlor,verloren verloren haben lose
        take|takes|took|taken nehmen nehme,nimmst,nimmt,nehmen nahm,nahmen genommen haben carry
        look_for|looks_for|looked_for|looked_for suchen suche,suchst,sucht,suchen suchte,suchten gesucht haben carry person animal @person,animal
        find|finds|found|found finden finde,findest,findet,finden fand,fanden gefunden haben carry person animal @person,animal
        see|sees|saw|seen sehen sehe,siehst,sieht,sehen sah,sahen gesehen haben carry paint person animal place @person,animal
        love|loves|loved|loved lieben liebe,liebst,liebt,lieben liebte,liebten geliebt haben person animal
        know|knows|knew|known kennen kenne,kennst,kennt,kennen kannte,kannten gekannt haben person far
        visit|visits|visited|visited besuchen besuche,besuchst,besucht,besuchen besuchte,besuchten besucht haben person far
        ask|asks|asked|asked fragen frage,fragst,fragt,fragen fragte,fragten gefragt haben person
        call|calls|called|called rufen rufe,rufst,ruft,rufen rief,riefen gerufen haben person animal
        hear|hears|heard|heard hören höre,hörst,hört,hören hörte,hörten gehört haben person animal hear @person,animal
        meet|meets|met|met treffen treffe,triffst,trifft,treffen traf,trafen getroffen haben person
        """,
        "trans",
    )
    + _verbs(
        """
        help|helps|helped|helped helfen helfe,hilfst,hilft,helfen half,halfen geholfen haben person animal
        thank|thanks|thanked|thanked danken danke,dankst,dankt,danken dankte,dankten gedankt haben person
        """,
        "dative",
    )
    + _verbs(
        """
        give|gives|gave|given geben gebe,gibst,gibt,geben gab,gaben gegeben haben carry
        show|shows|showed|shown zeigen zeige,zeigst,zeigt,zeigen zeigte,zeigten gezeigt haben carry
        send|sends|sent|sent schicken schicke,schickst,schickt,schicken schickte,schickten geschickt haben send
        bring|brings|brought|brought bringen bringe,bringst,bringt,bringen brachte,brachten gebracht haben carry
        """,
        "ditrans",
    )
    + _verbs(
        """
        sleep|sleeps|slept|slept schlafen schlafe,schläfst,schläft,schlafen schlief,schliefen geschlafen haben @person,animal
        work|works|worked|worked arbeiten arbeite,arbeitest,arbeitet,arbeiten arbeitete,arbeiteten gearbeitet haben
        laugh|laughs|laughed|laughed lachen lache,lachst,lacht,lachen lachte,lachten gelacht haben
        wait|waits|waited|waited warten warte,wartest,wartet,warten wartete,warteten gewartet haben @person,animal
        play|plays|played|played spielen spiele,spielst,spielt,spielen spielte,spielten gespielt haben @person,animal
        dance|dances|danced|danced tanzen tanze,tanzt,tanzt,tanzen tanzte,tanzten getanzt haben
        sing|sings|sang|sung singen singe,singst,singt,singen sang,sangen gesungen haben
        """,
        "intrans",
    )
    + _verbs(
        """
        live|lives|lived|lived wohnen wohne,wohnst,wohnt,wohnen wohnte,wohnten gewohnt haben @person,animal
        """,
        "live",
    )
    + _verbs(
        """
        swim|swims|swam|swum schwimmen schwimme,schwimmst,schwimmt,schwimmen schwamm,schwammen geschwommen sein @person,animal
        """,
        "swim",
    )
    + _verbs(
        """
        go|goes|went|gone gehen gehe,gehst,geht,gehen ging,gingen gegangen sein @person,animal
        run|runs|ran|run laufen laufe,läufst,läuft,laufen lief,liefen gelaufen sein @person,animal
        come|comes|came|come kommen komme,kommst,kommt,kommen kam,kamen gekommen sein @person,animal
        drive|drives|drove|driven fahren fahre,fährst,fährt,fahren fuhr,fuhren gefahren sein
        """,
        "motion",
    )
)

AUX_PRESENT = {
    "haben": {"1sg": "habe", "2sg": "hast", "3sg": "hat", "1pl": "haben", "3pl": "haben"},
    "sein": {"1sg": "bin", "2sg": "bist", "3sg": "ist", "1pl": "sind", "3pl": "sind"},
    "werden": {"1sg": "werde", "2sg": "wirst", "3sg": "wird", "1pl": "werden", "3pl": "werden"},
}
SEIN_PAST = {"1sg": "war", "2sg": "warst", "3sg": "war", "1pl": "waren", "3pl": "waren"}
# modal verbs: English (affirmative, negative or None), German present forms
MODALS = {
    "can": ("can", "cannot", {"1sg": "kann", "2sg": "kannst", "3sg": "kann", "1pl": "können", "3pl": "können"}),
    "must": ("must", None, {"1sg": "muss", "2sg": "musst", "3sg": "muss", "1pl": "müssen", "3pl": "müssen"}),
    "want": ("want to", "not want to", {"1sg": "will", "2sg": "willst", "3sg": "will", "1pl": "wollen", "3pl": "wollen"}),
}
# verbs that introduce a "that" clause (main clause in the present)
SAY_VERBS = [
    ("know", "knows", {"1sg": "weiß", "2sg": "weißt", "3sg": "weiß", "1pl": "wissen", "3pl": "wissen"}),
    ("think", "thinks", {"1sg": "glaube", "2sg": "glaubst", "3sg": "glaubt", "1pl": "glauben", "3pl": "glauben"}),
    ("say", "says", {"1sg": "sage", "2sg": "sagst", "3sg": "sagt", "1pl": "sagen", "3pl": "sagen"}),
    ("hope", "hopes", {"1sg": "hoffe", "2sg": "hoffst", "3sg": "hofft", "1pl": "hoffen", "3pl": "hoffen"}),
]

# person -> (English subject, English object, German nom, acc, dat)
PRONOUNS = {
    "1sg": ("I", "me", "ich", "mich", "mir"),
    "2sg": ("you", "you", "du", "dich", "dir"),
    "3sg_m": ("he", "him", "er", "ihn", "ihm"),
    "3sg_f": ("she", "her", "sie", "sie", "ihr"),
    "1pl": ("we", "us", "wir", "uns", "uns"),
    "3pl": ("they", "them", "sie", "sie", "ihnen"),
}

# determiners: English, German stem, kind (def, dieser, ein, none), numbers allowed
DETERMINERS = [
    ("the", "", "def", ("sg", "pl"), 8),
    ("a", "ein", "ein", ("sg",), 5),
    ("my", "mein", "ein", ("sg", "pl"), 1),
    ("your", "dein", "ein", ("sg", "pl"), 1),
    ("his", "sein", "ein", ("sg", "pl"), 1),
    ("her", "ihr", "ein", ("sg", "pl"), 1),
    ("our", "unser", "ein", ("sg", "pl"), 1),
    ("their", "ihr", "ein", ("sg", "pl"), 1),
    ("this", "dies", "dieser", ("sg",), 1),
    ("these", "dies", "dieser", ("pl",), 1),
    ("two", "zwei", "number", ("pl",), 1),
    ("three", "drei", "number", ("pl",), 1),
    ("many", "viel", "many", ("pl",), 1),
    ("", "", "bare", ("pl",), 2),
]

TIME = {  # tense -> [(English, German)]
    "present": [("today", "heute"), ("now", "jetzt")],
    "past": [("yesterday", "gestern")],
    "perfect": [("today", "heute")],
    "future": [("tomorrow", "morgen")],
    "modal": [("today", "heute"), ("tomorrow", "morgen"), ("now", "jetzt")],
}


# ---------------------------------------------------------------------------
# Noun phrases.


@dataclass
class NP:
    en: str
    de: dict  # case -> German words
    person: str  # 1sg, 2sg, 3sg, 1pl, 3pl (for agreement)
    pronoun: bool = False
    indefinite: bool = False  # "a" or a bare plural: negated with "kein"
    negatable: bool = True  # "many", numbers: not negated at all
    de_neg: dict = field(default_factory=dict)  # case -> "kein ..." form
    key: str = ""  # pronoun key / noun identity, to avoid "I see me"
    en_obj: str = ""  # English object form of a pronoun ("him")


def _an(words: list[str]) -> list[str]:
    """English a -> an before a vowel."""
    out = list(words)
    for i, w in enumerate(out[:-1]):
        if w == "a" and out[i + 1][0] in "aeiou":
            out[i] = "an"
    return out


def _de_np(noun: Noun, number: str, case: str, det: tuple, adj: Adjective | None, stem_override: str = "") -> str:
    en_det, stem, kind, _, _ = det
    stem = stem_override or stem
    g = "pl" if number == "pl" else noun.gender
    key = (case, g)
    if kind == "def":
        article, endings = DEFINITE[key], WEAK
    elif kind == "dieser":
        article, endings = stem + DIESER_ENDING[key], WEAK
    elif kind == "ein":
        article, endings = stem + EIN_ENDING[key], MIXED
    elif kind == "many":
        article, endings = stem + STRONG_PLURAL[case], None
    elif kind == "number":
        article, endings = stem, None
    else:  # bare plural
        article, endings = "", None
    words = [article] if article else []
    if adj is not None:
        ending = endings[key] if endings is not None else STRONG_PLURAL[case]
        words.append(adj.stem + ending)
    words.append(noun.form(number, case))
    return " ".join(words)


def noun_phrase(rng: random.Random, noun: Noun, number: str | None = None, dets=None, adj_rate: float = 0.35) -> NP:
    number = number or rng.choice(["sg", "sg", "pl"])
    options = [d for d in (dets or DETERMINERS) if number in d[3]]
    if noun.en in ("man", "woman"):  # "unsere Frau" would read as "our wife"
        options = [d for d in options if d[2] != "ein" or d[0] == "a"]
    det = rng.choices(options, weights=[d[4] for d in options])[0]
    cls = next(t for t in ("person", "animal", "place", "thing") if t in noun.tags)
    adjs = [a for a in ADJECTIVES if cls in a.fits]
    adj = rng.choice(adjs) if adjs and rng.random() < adj_rate else None
    en_words = [det[0]] if det[0] else []
    if adj is not None:
        en_words.append(adj.en)
    en_words.append(noun.en if number == "sg" else noun.en_pl)
    de = {c: _de_np(noun, number, c, det, adj) for c in CASES}
    indefinite = det[2] in ("ein", "bare") and det[0] in ("a", "")
    neg = {c: _de_np(noun, number, c, ("no", "kein", "ein", (), 0), adj) for c in CASES} if indefinite else {}
    return NP(" ".join(_an(en_words)), de, "3sg" if number == "sg" else "3pl", indefinite=indefinite,
              negatable=det[2] not in ("number", "many"), de_neg=neg, key=noun.en)


def pronoun_phrase(key: str) -> NP:
    en_s, en_o, nom, acc, dat = PRONOUNS[key]
    person = key.split("_")[0]
    return NP(en_s, {"nom": nom, "acc": acc, "dat": dat}, person, pronoun=True, key=key, en_obj=en_o)


def random_subject(rng: random.Random, tags: frozenset, allow_you: bool = True) -> NP:
    if rng.random() < 0.3:
        keys = [k for k in PRONOUNS if allow_you or k != "2sg"]
        return pronoun_phrase(rng.choice(keys))
    pool = []
    if "person" in tags:
        pool += PEOPLE * 2
    if "animal" in tags:
        pool += ANIMALS
    return noun_phrase(rng, rng.choice(pool))


def random_object(rng: random.Random, tags: frozenset, subject: NP, pronoun_ok: bool) -> NP:
    animate = tags & {"person", "animal"}
    if animate and pronoun_ok and rng.random() < 0.25:
        clash = {"1sg": {"1sg", "1pl"}, "1pl": {"1sg", "1pl"}, "2sg": {"2sg"}}.get(subject.key, set())
        keys = [k for k in PRONOUNS if k not in clash]
        return pronoun_phrase(rng.choice(keys))
    pool = []
    if "person" in tags:
        pool += PEOPLE
    if "animal" in tags:
        pool += ANIMALS
    if "place" in tags:
        pool += PLACES
    thing_tags = tags - {"person", "animal", "place"}
    pool += [n for n in THINGS if n.tags & thing_tags]
    if "far" in tags:
        pool += [n for n in PLACES if "far" in n.tags]
    noun = rng.choice(pool)
    while noun.en == subject.key:
        noun = rng.choice(pool)
    if "place" in noun.tags:
        return noun_phrase(rng, noun, "sg", dets=[d for d in DETERMINERS if d[0] in ("the", "this", "our", "my", "a")])
    return noun_phrase(rng, noun)


# ---------------------------------------------------------------------------
# Places in prepositional phrases.


def place_phrase(rng: random.Random, tags: str, direction: bool, swim: bool = False) -> tuple[str, str]:
    pool = [p for p in PLACES if tags in p.tags] if tags else PLACES
    place = rng.choice(pool)
    allowed = ["the"] * 6 + ["a", "this"] + (["my", "our", "your"] if "own" in place.tags else [])
    det_en = rng.choice(allowed)
    det = next(d for d in DETERMINERS if d[0] == det_en)
    adjs = [a for a in ADJECTIVES if "place" in a.fits]
    adj = rng.choice(adjs) if rng.random() < 0.25 else None
    if direction:
        en_prep, de_prep = place.to
        case = "acc" if de_prep == "in" else "dat"
    elif swim:
        en_prep, de_prep, case = "in", "in", "dat"
    else:
        en_prep, de_prep = place.at
        case = "dat"
    de_words = _de_np(place, "sg", case, det, adj).split()
    if det[2] == "def" and (de_prep, de_words[0]) in CONTRACTIONS:
        de_words = [CONTRACTIONS[(de_prep, de_words[0])]] + de_words[1:]
    else:
        de_words = [de_prep] + de_words
    en_words = [en_prep, det_en] + ([adj.en] if adj else []) + [place.en]
    return " ".join(_an(en_words)), " ".join(de_words)


# ---------------------------------------------------------------------------
# Clauses. A clause is built once and realised as a main clause (verb second),
# a question (verb first) or a subordinate clause (verb last).


@dataclass
class Clause:
    subject: NP
    finite: str  # German finite verb
    nonfinite: str  # German participle / infinitive, or ""
    middle: list  # German middle-field words after the subject, in order
    en: str  # English clause without the subject, e.g. "has bought a car"
    en_question: tuple = ()  # (auxiliary, rest) for a yes/no question, or () if none
    time: tuple = ()  # (English, German) time adverb, if any, placed by realise
    time_slot: int = 0  # index in middle where the German adverb goes
    pronoun_object: bool = False


def _en_agree(subject: NP, sg: str, other: str) -> str:
    return sg if subject.person == "3sg" else other


def _en_be(subject: NP, past: bool) -> str:
    if past:
        return "was" if subject.person in ("1sg", "3sg") else "were"
    return {"1sg": "am", "3sg": "is"}.get(subject.person, "are")


def verb_clause(rng: random.Random, tense: str, negate: bool, allow_time: bool, pronoun_obj_ok: bool = True,
                kinds: tuple = ()) -> Clause | None:
    """A clause with a full verb: subject, verb, objects, place, maybe negation."""
    verb = rng.choice([v for v in VERBS if v.kind in kinds] if kinds else VERBS)
    subject = random_subject(rng, verb.subjects, allow_you=tense != "past")
    if subject.pronoun and "person" not in verb.subjects:
        return None
    person = subject.person
    # -- objects and places (German middle-field order: pronoun, [time], dative, [nicht], accusative, place)
    pron: list[str] = []
    dat: list[str] = []
    acc: list[str] = []
    place_en, place_de = "", ""
    en_objects = ""
    neg_done = False  # negation expressed by "kein"
    if verb.kind in ("trans", "dative"):
        obj = random_object(rng, verb.objects, subject, pronoun_obj_ok)
        case = "dat" if verb.kind == "dative" else "acc"
        if negate and not obj.negatable:
            return None
        if negate and obj.indefinite and verb.kind == "trans":
            acc.append(obj.de_neg["acc"])
            en_objects = obj.en
            neg_done = True
        elif negate and obj.indefinite:
            return None  # "hilft keinem Kind" is fine German but rare; keep it simple
        else:
            (pron if obj.pronoun else (dat if case == "dat" else acc)).append(obj.de[case])
            en_objects = obj.en_obj if obj.pronoun else obj.en
        if not negate and rng.random() < 0.2 and not obj.pronoun:
            place_en, place_de = place_phrase(rng, "", direction=False)
    elif verb.kind == "ditrans":
        receiver = noun_phrase(rng, rng.choice([n for n in PEOPLE if n.en != subject.key]), adj_rate=0.15)
        thing = random_object(rng, verb.objects, subject, False)
        if negate and (not thing.negatable or not receiver.negatable):
            return None
        dat.append(receiver.de["dat"])
        if negate and thing.indefinite:
            acc.append(thing.de_neg["acc"])
            en_objects = f"{receiver.en} {thing.en}"
            neg_done = True
        else:
            acc.append(thing.de["acc"])
            en_objects = f"{receiver.en} {thing.en}"
    elif verb.kind == "intrans":
        if rng.random() < 0.5:
            place_en, place_de = place_phrase(rng, "", direction=False)
            if verb.en == "laugh" and place_en.startswith("at "):
                return None  # "laughs at the river" means something else
    elif verb.kind == "live":
        place_en, place_de = place_phrase(rng, "home", direction=False)
    elif verb.kind == "swim":
        place_en, place_de = place_phrase(rng, "water", direction=False, swim=True)
    elif verb.kind == "motion":
        tags = "drive" if verb.infinitive == "fahren" else ""
        place_en, place_de = place_phrase(rng, tags, direction=True)
    # -- tense
    base, third = verb.en, verb.en_3sg
    stative = verb.infinitive in ("kennen", "lieben", "wohnen")  # "has known the man today" reads oddly
    time = rng.choice(TIME["modal" if tense.startswith("modal") else tense]) if allow_time and not stative and rng.random() < 0.25 else ()
    if negate and place_de and verb.kind in ("trans", "dative", "ditrans"):
        return None
    nonfinite = ""
    if tense == "present":
        finite = verb.present[person]
        if negate:
            en_verb = f"{_en_agree(subject, 'does', 'do')} not {base}"
        else:
            en_verb = _en_agree(subject, third, base)
        q = (_en_agree(subject, "does", "do"), base)
    elif tense == "past":
        finite = verb.past[0 if person in ("1sg", "3sg") else 1]
        en_verb = f"did not {base}" if negate else verb.en_past
        q = ("did", base)
    elif tense == "perfect":
        finite = AUX_PRESENT[verb.aux][person]
        nonfinite = verb.participle
        have = _en_agree(subject, "has", "have")
        en_verb = f"{have} not {verb.en_pp}" if negate else f"{have} {verb.en_pp}"
        q = (have, verb.en_pp)
    elif tense == "future":
        finite = AUX_PRESENT["werden"][person]
        nonfinite = verb.infinitive
        en_verb = f"will not {base}" if negate else f"will {base}"
        q = ("will", base)
    else:  # modal_can, modal_must, modal_want
        name = tense.split("_")[1]
        en_aff, en_neg, forms = MODALS[name]
        if negate and en_neg is None:
            return None
        finite = forms[person]
        nonfinite = verb.infinitive
        if name == "want":
            wants = _en_agree(subject, "wants to", "want to")
            en_verb = f"{_en_agree(subject, 'does', 'do')} not want to {base}" if negate else f"{wants} {base}"
            q = (_en_agree(subject, "does", "do"), f"want to {base}")
        else:
            en_verb = f"{en_neg} {base}" if negate else f"{en_aff} {base}"
            q = (en_aff, base)
    # -- German middle field
    middle = pron + dat
    if negate and not neg_done:
        # nicht after the objects (definite or pronoun), before a place phrase
        middle = middle + acc
        time_slot = len(middle)
        middle = middle + ["nicht"]
    else:
        time_slot = len(pron)
        middle = middle + acc
    if place_de:
        middle.append(place_de)
    if time and negate and not neg_done:
        time_slot = middle.index("nicht")
    en_rest = " ".join(w for w in (en_objects, place_en) if w)
    en = " ".join(w for w in (en_verb, en_rest) if w)
    en_q = (q[0], " ".join(w for w in (q[1], en_rest) if w)) if not negate else ()
    return Clause(subject, finite, nonfinite, middle, en, en_q, time, time_slot, bool(pron))


def copula_clause(rng: random.Random, tense: str, negate: bool, allow_time: bool) -> Clause | None:
    """"The dog is hungry." / "The man was in the garden."."""
    subject = random_subject(rng, frozenset({"person", "animal"}), allow_you=True)
    past = tense == "past"
    person = subject.person
    finite = (SEIN_PAST if past else AUX_PRESENT["sein"])[person]
    if rng.random() < 0.7:
        cls = "person" if (subject.pronoun or subject.key in {n.en for n in PEOPLE}) else "animal"
        adj = rng.choice([a for a in ADJECTIVES if cls in a.fits and a.en not in subject.en.split()])
        pred_en, pred_de = adj.en, adj.predicative
    else:
        pred_en, pred_de = place_phrase(rng, "", direction=False)
    be = _en_be(subject, past)
    en = f"{be} not {pred_en}" if negate else f"{be} {pred_en}"
    middle = (["nicht"] if negate else []) + [pred_de]
    time = rng.choice(TIME["past" if past else "present"]) if allow_time and rng.random() < 0.2 else ()
    q = (be, pred_en) if not negate else ()
    return Clause(subject, finite, "", middle, en, q, time, 0)


# ---------------------------------------------------------------------------
# Realising clauses as sentences.


def _cap(text: str) -> str:
    return text[0].upper() + text[1:]


def _de_tail(clause: Clause, with_time: bool) -> list[str]:
    middle = list(clause.middle)
    if with_time and clause.time:
        middle.insert(clause.time_slot, clause.time[1])
    return middle


def main_clause(clause: Clause, front_time: bool) -> tuple[str, str]:
    """Verb second: "Der Mann kauft heute ein Auto" / "Heute kauft der Mann ein Auto"."""
    subj_en, subj_de = clause.subject.en, clause.subject.de["nom"]
    if clause.time and front_time:
        de = [clause.time[1], clause.finite, subj_de] + _de_tail(clause, False) + [clause.nonfinite]
        en = [clause.time[0], subj_en, clause.en]
    else:
        de = [subj_de, clause.finite] + _de_tail(clause, True) + [clause.nonfinite]
        en = [subj_en, clause.en] + ([clause.time[0]] if clause.time else [])
    return " ".join(w for w in en if w), " ".join(w for w in de if w)


def question(clause: Clause) -> tuple[str, str]:
    """Verb first: "Kauft der Mann ein Auto?"."""
    aux, rest = clause.en_question
    en = [aux, clause.subject.en, rest] + ([clause.time[0]] if clause.time else [])
    de = [clause.finite, clause.subject.de["nom"]] + _de_tail(clause, True) + [clause.nonfinite]
    return " ".join(w for w in en if w), " ".join(w for w in de if w)


def subordinate(clause: Clause) -> tuple[str, str]:
    """Verb last: "... dass der Mann ein Auto gekauft hat"."""
    en = [clause.subject.en, clause.en] + ([clause.time[0]] if clause.time else [])
    de = [clause.subject.de["nom"]] + _de_tail(clause, True) + [clause.nonfinite, clause.finite]
    return " ".join(w for w in en if w), " ".join(w for w in de if w)


def inverted(clause: Clause) -> str:
    """German verb-second after a fronted clause: "..., spielt die Katze im Garten"."""
    de = [clause.finite, clause.subject.de["nom"]] + _de_tail(clause, True) + [clause.nonfinite]
    return " ".join(w for w in de if w)


TENSES = ["present"] * 4 + ["past"] * 2 + ["perfect"] * 2 + ["future", "modal_can", "modal_must", "modal_want"]


def _noun_subject_with_pronoun_object(clause: Clause) -> bool:
    """Inversion with a noun subject and a pronoun object ("Heute sieht der Mann ihn") reads stiffly: avoid it."""
    return clause.pronoun_object and not clause.subject.pronoun


def sentence(rng: random.Random) -> tuple[str, str] | None:
    kind = rng.choices(["statement", "question", "copula", "that", "because", "if"], weights=[50, 12, 10, 14, 7, 7])[0]
    if kind == "statement":
        tense = rng.choice(TENSES)
        clause = verb_clause(rng, tense, negate=rng.random() < 0.25, allow_time=True)
        if clause is None:
            return None
        front = rng.random() < 0.5
        if front and clause.time and _noun_subject_with_pronoun_object(clause):
            return None
        en, de = main_clause(clause, front)
        return _cap(en) + ".", _cap(de) + "."
    if kind == "copula":
        clause = copula_clause(rng, rng.choice(["present", "present", "past"]), rng.random() < 0.25, True)
        en, de = main_clause(clause, rng.random() < 0.5)
        return _cap(en) + ".", _cap(de) + "."
    if kind == "question":
        if rng.random() < 0.2:
            clause = copula_clause(rng, rng.choice(["present", "past"]), False, True)
        else:
            clause = verb_clause(rng, rng.choice(TENSES), negate=False, allow_time=True, pronoun_obj_ok=False)
        if clause is None or not clause.en_question:
            return None
        en, de = question(clause)
        return _cap(en) + "?", _cap(de) + "?"
    if kind == "that":
        say_en, say_3sg, say_de = rng.choice(SAY_VERBS)
        main_subject = random_subject(rng, frozenset({"person"}))
        clause = verb_clause(rng, rng.choice(TENSES), negate=rng.random() < 0.2, allow_time=True)
        if clause is None:
            return None
        sub_en, sub_de = subordinate(clause)
        en = f"{main_subject.en} {_en_agree(main_subject, say_3sg, say_en)} that {sub_en}"
        de = f"{main_subject.de['nom']} {say_de[main_subject.person]}, dass {sub_de}"
        return _cap(en) + ".", _cap(de) + "."
    # "because" / "if": two short clauses with intransitive verbs or "sein"
    tense = "present" if kind == "if" else rng.choice(["present", "past"])

    def short() -> Clause | None:
        if rng.random() < 0.35:
            return copula_clause(rng, tense, False, False)
        return verb_clause(rng, tense, negate=False, allow_time=False, kinds=("intrans", "live", "swim", "motion"))

    first, second = short(), short()
    if first is None or second is None or first.subject.en == second.subject.en:
        return None
    if kind == "because":
        en1, de1 = main_clause(first, False)
        en2, de2 = subordinate(second)
        return _cap(f"{en1} because {en2}") + ".", _cap(f"{de1}, weil {de2}") + "."
    if _noun_subject_with_pronoun_object(second):
        return None
    en1, de1 = subordinate(first)
    en2, _ = main_clause(second, False)
    return _cap(f"if {en1}, {en2}") + ".", _cap(f"wenn {de1}, {inverted(second)}") + "."


# ---------------------------------------------------------------------------
# Tokens, de-duplication, splits, files.

_TOKEN = re.compile(r"\w+|[^\w\s]")


def n_tokens(text: str) -> int:
    return len(_TOKEN.findall(text))


def generate(seed: int = SEED, sizes: dict[str, int] = SIZES) -> dict[str, list[dict]]:
    """Sample unique pairs (unique on both sides) and split them."""
    rng = random.Random(seed)
    total = sum(sizes.values())
    pairs: list[tuple[str, str]] = []
    seen_en: set[str] = set()
    seen_de: set[str] = set()
    while len(pairs) < total:
        pair = sentence(rng)
        if pair is None:
            continue
        en, de = pair
        if not (MIN_TOKENS <= n_tokens(en) <= MAX_TOKENS and MIN_TOKENS <= n_tokens(de) <= MAX_TOKENS):
            continue
        if en.lower() in seen_en or de.lower() in seen_de:
            continue
        seen_en.add(en.lower())
        seen_de.add(de.lower())
        pairs.append((en, de))
    rng.shuffle(pairs)
    splits, start = {}, 0
    for name in ("validation", "test", "train"):
        chunk = pairs[start : start + sizes[name]]
        start += sizes[name]
        splits[name] = [{"translation": {"en": en, "de": de}} for en, de in chunk]
    return {name: splits[name] for name in ("train", "validation", "test")}


def write(splits: dict[str, list[dict]], out_dir: Path = OUT_DIR) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, rows in splits.items():
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")
        buffer = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=9) as f:
            f.write(text)
        (out_dir / f"{name}.jsonl.gz").write_bytes(buffer.getvalue())


def stats(splits: dict[str, list[dict]]) -> None:
    for name, rows in splits.items():
        vocab = {lang: set() for lang in ("en", "de")}
        lengths = {lang: [] for lang in ("en", "de")}
        for r in rows:
            for lang in ("en", "de"):
                tokens = _TOKEN.findall(r["translation"][lang].lower())
                vocab[lang].update(tokens)
                lengths[lang].append(len(tokens))
        print(
            f"{name}: {len(rows)} pairs; tokens per sentence en {min(lengths['en'])}-{max(lengths['en'])} "
            f"(mean {sum(lengths['en']) / len(rows):.1f}), de {min(lengths['de'])}-{max(lengths['de'])} "
            f"(mean {sum(lengths['de']) / len(rows):.1f}); vocabulary en {len(vocab['en'])}, de {len(vocab['de'])}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--show", type=int, default=0, help="print this many random pairs and write nothing")
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    args = parser.parse_args()
    splits = generate(args.seed)
    if args.show:
        rows = random.Random(0).sample(splits["train"], args.show)
        for r in rows:
            print(r["translation"]["en"], "|", r["translation"]["de"])
        return
    write(splits, args.out)
    stats(splits)


if __name__ == "__main__":
    main()
