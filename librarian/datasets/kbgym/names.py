"""Name pools of the fictional KBGym universe (invented places; ordinary first and last names)."""

from __future__ import annotations

FEMALE_FIRST: tuple[str, ...] = (
    "Ada", "Alma", "Anika", "Beatrix", "Bryony", "Cora", "Dalia", "Edith", "Elin", "Esme",
    "Fenna", "Freya", "Greta", "Hazel", "Ilse", "Imogen", "Iris", "Juno", "Kaia", "Lena",
    "Linnea", "Lotte", "Mabel", "Maren", "Mira", "Nell", "Nora", "Odile", "Orla", "Petra",
    "Rosa", "Runa", "Saskia", "Selma", "Signe", "Thea", "Tova", "Una", "Vera", "Wren",
    "Yara", "Zelda", "Agnes", "Clara", "Hedda", "Liv", "Marit", "Solveig",
)

MALE_FIRST: tuple[str, ...] = (
    "Aldo", "Anton", "Arvid", "Bastian", "Bram", "Caspar", "Cyril", "Dario", "Edvin", "Elias",
    "Emil", "Felix", "Finn", "Gideon", "Gustav", "Hakon", "Ivo", "Jasper", "Jonas", "Kasimir",
    "Lars", "Leif", "Linus", "Magnus", "Matteo", "Milo", "Nils", "Oskar", "Otto", "Pavel",
    "Quentin", "Rasmus", "Rune", "Silas", "Soren", "Tobias", "Ulric", "Viggo", "Walter", "Yannick",
    "Anselm", "Benno", "Casimir", "Dag", "Evert", "Ferris", "Halvard", "Ingmar",
)

SURNAMES: tuple[str, ...] = (
    "Abernathy", "Aldenmoor", "Ashgrove", "Bellweather", "Blackwood", "Bramblecote", "Calloway",
    "Carrow", "Castellan", "Corvell", "Dunmore", "Eastlake", "Elderberry", "Fairbrook", "Fenwick",
    "Foxhollow", "Galloway", "Greaves", "Hartwell", "Hawthorne", "Hollins", "Ivester", "Jessup",
    "Kettering", "Kinsley", "Larkspur", "Lindqvist", "Lockhart", "Marchetti", "Merriweather",
    "Montclair", "Northcott", "Oakhurst", "Ormsby", "Pemberton", "Penrose", "Quillfeather",
    "Radcliffe", "Ravensworth", "Rookwood", "Saltonstall", "Sandoval", "Thistlewood", "Thornbury",
    "Underhill", "Vantongeren", "Varga", "Wainwright", "Westerberg", "Whitlock", "Winterbourne",
    "Yarrowby", "Zellweger", "Ambrose", "Birchall", "Crane", "Delacroix", "Everly", "Fairweather",
    "Goodfellow", "Holloway", "Ingleby", "Juniper", "Kestrel", "Loxley", "Moorcroft", "Nettleton",
    "Oldcastle", "Pickering", "Quarry", "Redfern", "Stavros", "Tremaine", "Upton", "Vexley",
    "Whitmore", "Yelverton", "Ashdown", "Brightwater", "Cobbledick", "Dovecote", "Elmstead",
    "Farthing", "Gilliflower", "Hollowell", "Ironside", "Jellicoe", "Kingsmill", "Lavender",
    "Mallory", "Nightingale", "Oxley", "Periwinkle", "Quenby", "Rosewarne", "Sparrowhawk",
    "Tolliver", "Umberleigh", "Verity", "Wexcombe",
)

CITIES: tuple[str, ...] = (
    "Port Avel", "Brindlemere", "Caskwater", "Dunhollow", "Eskerby", "Fallowmarch", "Glimmerford",
    "Harrowgate Vale", "Ivywick", "Juniper Cross", "Kelderwyn", "Lowmantle", "Mirefield",
    "Northsedge", "Oxbarrow", "Pellingham", "Quillhaven", "Rookmere",
)

JOBS: tuple[str, ...] = (
    "arborist", "archivist", "baker", "beekeeper", "bookbinder", "cartographer", "ceramicist",
    "chemist", "clockmaker", "cooper", "dentist", "electrician", "ferry pilot", "florist",
    "geologist", "glassblower", "harbour master", "illustrator", "jeweller", "lighthouse keeper",
    "locksmith", "luthier", "midwife", "miller", "nurse", "optician", "organ builder", "pharmacist",
    "potter", "printer", "radio operator", "saddler", "stonemason", "surveyor", "tailor",
    "translator", "upholsterer", "veterinarian", "weaver", "zoologist",
)

HOBBIES: tuple[str, ...] = (
    "archery", "astronomy", "birdwatching", "bouldering", "calligraphy", "chess", "crochet",
    "cycling", "fencing", "fly fishing", "gardening", "geocaching", "juggling", "kayaking",
    "kite flying", "knitting", "mushroom foraging", "origami", "orienteering", "painting",
    "pottery", "rowing", "sailing", "sculpting", "stamp collecting", "tango", "tarot reading",
    "watercolour", "whittling", "yoga",
)
