"""Static reference data for the synthetic account: ports, terminals, carriers, rail, vessels.

Everything here is plain tuples so that the generator can index it by small integers. The ports,
terminals (FIRMS codes), IANA zones, carriers (SCAC), rail carriers, inland destinations and
origins are the public facts a US importer's book is built from; street addresses, SMDG codes and
coordinates are plausible values, not authoritative ones.
"""

from __future__ import annotations

from typing import NamedTuple


class Port(NamedTuple):
    """A seaport or inland point (rendered as JSON:API type ``port``)."""

    code: str  # UN/LOCODE
    name: str
    city: str
    state_abbr: str | None
    country_code: str
    time_zone: str
    latitude: str  # live API sends coordinates as strings
    longitude: str


class Terminal(NamedTuple):
    """A marine terminal at a US port of discharge (type ``terminal``)."""

    port: str  # UN/LOCODE of its port
    name: str
    nickname: str
    firms_code: str
    smdg_code: str
    street: str
    city: str
    state: str
    state_abbr: str
    zip: str
    # What the terminal reports: availability, holds, fees, lfd, appointments.
    provides_availability: bool
    provides_fees: bool
    provides_lfd: bool


class RailTerminal(NamedTuple):
    """An inland rail ramp (type ``rail_terminal``) serving an inland destination."""

    port: str  # UN/LOCODE of the inland point it serves
    name: str
    nickname: str
    firms_code: str


class Carrier(NamedTuple):
    """An ocean carrier."""

    scac: str
    name: str
    short_name: str
    vessel_prefix: str
    posts_line_lfd: bool


ORIGINS: tuple[Port, ...] = (
    Port("CNSHA", "Shanghai", "Shanghai", "SH", "CN", "Asia/Shanghai", "31.36636", "121.6147"),
    Port("CNNGB", "Ningbo", "Ningbo", "ZJ", "CN", "Asia/Shanghai", "29.86569", "121.5440"),
    Port("CNYTN", "Yantian", "Shenzhen", "GD", "CN", "Asia/Shanghai", "22.57340", "114.2766"),
    Port("KRPUS", "Busan", "Busan", None, "KR", "Asia/Seoul", "35.10168", "129.0403"),
    Port("TWKHH", "Kaohsiung", "Kaohsiung", None, "TW", "Asia/Taipei", "22.61626", "120.2997"),
    Port(
        "VNSGN",
        "Ho Chi Minh City",
        "Ho Chi Minh City",
        None,
        "VN",
        "Asia/Ho_Chi_Minh",
        "10.76262",
        "106.6602",
    ),
    Port("IDJKT", "Jakarta", "Jakarta", None, "ID", "Asia/Jakarta", "-6.10446", "106.8805"),
)

US_PORTS: tuple[Port, ...] = (
    Port(
        "USLAX",
        "Los Angeles",
        "Los Angeles",
        "CA",
        "US",
        "America/Los_Angeles",
        "33.73972",
        "-118.2617",
    ),
    Port(
        "USLGB",
        "Long Beach",
        "Long Beach",
        "CA",
        "US",
        "America/Los_Angeles",
        "33.75408",
        "-118.2165",
    ),
    Port(
        "USNYC",
        "New York / New Jersey",
        "New York",
        "NY",
        "US",
        "America/New_York",
        "40.68432",
        "-74.1446",
    ),
    Port("USSAV", "Savannah", "Savannah", "GA", "US", "America/New_York", "32.12821", "-81.1428"),
    Port("USHOU", "Houston", "Houston", "TX", "US", "America/Chicago", "29.61311", "-95.0163"),
    Port("USORF", "Norfolk", "Norfolk", "VA", "US", "America/New_York", "36.90417", "-76.3369"),
    Port(
        "USCHS",
        "Charleston",
        "Charleston",
        "SC",
        "US",
        "America/New_York",
        "32.831492181",
        "-79.89124957",
    ),
    Port("USOAK", "Oakland", "Oakland", "CA", "US", "America/Los_Angeles", "37.79545", "-122.2797"),
    Port("USSEA", "Seattle", "Seattle", "WA", "US", "America/Los_Angeles", "47.58121", "-122.3477"),
    Port("USTIW", "Tacoma", "Tacoma", "WA", "US", "America/Los_Angeles", "47.26715", "-122.4133"),
)

INLAND: tuple[Port, ...] = (
    Port("USCHI", "Chicago", "Chicago", "IL", "US", "America/Chicago", "41.85003", "-87.6500"),
    Port("USMEM", "Memphis", "Memphis", "TN", "US", "America/Chicago", "35.14953", "-90.0490"),
    Port("USDAL", "Dallas", "Dallas", "TX", "US", "America/Chicago", "32.78306", "-96.8067"),
    Port(
        "USMKC", "Kansas City", "Kansas City", "MO", "US", "America/Chicago", "39.09973", "-94.5786"
    ),
    Port("USATL", "Atlanta", "Atlanta", "GA", "US", "America/New_York", "33.74900", "-84.3880"),
    Port("USCMH", "Columbus", "Columbus", "OH", "US", "America/New_York", "39.96118", "-82.9988"),
)

WEST_COAST = frozenset({"USLAX", "USLGB", "USOAK", "USSEA", "USTIW"})
RAIL_HEAVY = frozenset({"USLAX", "USLGB"})

_STATE_NAMES = {
    "CA": "California",
    "NY": "New York",
    "NJ": "New Jersey",
    "GA": "Georgia",
    "TX": "Texas",
    "VA": "Virginia",
    "SC": "South Carolina",
    "WA": "Washington",
}


def _t(
    port: str,
    name: str,
    nick: str,
    firms: str,
    smdg: str,
    street: str,
    city: str,
    st: str,
    zip_code: str,
    avail: bool = True,
    fees: bool = True,
    lfd: bool = True,
) -> Terminal:
    return Terminal(
        port,
        name,
        nick,
        firms,
        smdg,
        street,
        city,
        _STATE_NAMES[st],
        st,
        zip_code,
        avail,
        fees,
        lfd,
    )


TERMINALS: tuple[Terminal, ...] = (
    _t(
        "USLAX",
        "APM Terminals Pier 400",
        "APM",
        "W185",
        "APMT",
        "2500 Navy Way",
        "San Pedro",
        "CA",
        "90731",
    ),
    _t(
        "USLAX",
        "Fenix Marine Services",
        "FMS",
        "Y257",
        "FMS",
        "614 Terminal Way",
        "San Pedro",
        "CA",
        "90731",
    ),
    _t(
        "USLAX",
        "TraPac Los Angeles",
        "TraPac",
        "Y258",
        "TRPC",
        "630 W Harry Bridges Blvd",
        "Wilmington",
        "CA",
        "90744",
        fees=False,
    ),
    _t(
        "USLAX",
        "West Basin Container Terminal",
        "WBCT",
        "Y773",
        "WBCT",
        "2050 John S Gibson Blvd",
        "San Pedro",
        "CA",
        "90731",
    ),
    _t(
        "USLAX",
        "Everport Terminal Services",
        "ETS",
        "Y124",
        "EVPT",
        "389 Terminal Island Way",
        "San Pedro",
        "CA",
        "90731",
    ),
    _t(
        "USLAX",
        "Yusen Terminals",
        "YTI",
        "Y790",
        "YTI",
        "701 New Dock St",
        "Terminal Island",
        "CA",
        "90731",
        lfd=False,
    ),
    _t(
        "USLGB",
        "Long Beach Container Terminal",
        "LBCT",
        "WAC8",
        "LBCT",
        "1171 Pier F Ave",
        "Long Beach",
        "CA",
        "90802",
    ),
    _t(
        "USLGB",
        "Total Terminals International",
        "TTI",
        "Z952",
        "TTI",
        "301 Hanjin Rd",
        "Long Beach",
        "CA",
        "90802",
    ),
    _t(
        "USLGB",
        "International Transportation Service",
        "ITS",
        "Y309",
        "ITS",
        "1281 Pier G Way",
        "Long Beach",
        "CA",
        "90802",
        avail=False,
    ),
    _t(
        "USLGB",
        "Pacific Container Terminal",
        "PCT",
        "W182",
        "PCT",
        "1521 Pier J Ave",
        "Long Beach",
        "CA",
        "90802",
    ),
    _t(
        "USLGB",
        "SSA Marine Pier A",
        "SSA A",
        "Z978",
        "SSAA",
        "700 Pier A Plaza",
        "Long Beach",
        "CA",
        "90813",
        fees=False,
    ),
    _t(
        "USNYC",
        "APM Terminals Port Elizabeth",
        "APM NJ",
        "E425",
        "APMNJ",
        "5080 McLester St",
        "Elizabeth",
        "NJ",
        "07201",
    ),
    _t(
        "USNYC",
        "Maher Terminals",
        "Maher",
        "E416",
        "MAHER",
        "1210 Corbin St",
        "Elizabeth",
        "NJ",
        "07201",
    ),
    _t(
        "USNYC",
        "Port Newark Container Terminal",
        "PNCT",
        "F577",
        "PNCT",
        "241 Calcutta St",
        "Newark",
        "NJ",
        "07114",
    ),
    _t(
        "USNYC",
        "GCT Bayonne",
        "GCTB",
        "E364",
        "GCTB",
        "302 Port Terminal Blvd",
        "Bayonne",
        "NJ",
        "07002",
        fees=False,
    ),
    _t(
        "USSAV",
        "Garden City Terminal",
        "GCT",
        "L737",
        "GCTS",
        "2 Main St",
        "Garden City",
        "GA",
        "31408",
    ),
    _t(
        "USHOU",
        "Barbours Cut Container Terminal",
        "BCT",
        "S787",
        "BCT",
        "1515 E Barbours Cut Blvd",
        "La Porte",
        "TX",
        "77571",
    ),
    _t(
        "USHOU",
        "Bayport Container Terminal",
        "BPT",
        "V136",
        "BPT",
        "12619 Port Rd",
        "Seabrook",
        "TX",
        "77586",
    ),
    _t(
        "USORF",
        "Norfolk International Terminals",
        "NIT",
        "L005",
        "NIT",
        "7737 Hampton Blvd",
        "Norfolk",
        "VA",
        "23505",
    ),
    _t(
        "USORF",
        "Virginia International Gateway",
        "VIG",
        "N195",
        "VIG",
        "1000 Virginia Intl Blvd",
        "Portsmouth",
        "VA",
        "23703",
        avail=False,
    ),
    _t(
        "USCHS",
        "Wando Welch Terminal",
        "WWT",
        "N598",
        "WWMT",
        "400 Long Point Rd.",
        "Mt. Pleasant",
        "SC",
        "29464",
    ),
    _t(
        "USCHS",
        "North Charleston Terminal",
        "NCT",
        "L391",
        "NCT",
        "1000 Remount Rd",
        "North Charleston",
        "SC",
        "29406",
        lfd=False,
    ),
    _t(
        "USOAK",
        "Oakland International Container Terminal",
        "OICT",
        "Z985",
        "OICT",
        "1717 Middle Harbor Rd",
        "Oakland",
        "CA",
        "94607",
    ),
    _t(
        "USOAK",
        "TraPac Oakland",
        "TraPac OAK",
        "Y549",
        "TRPO",
        "2800 7th St",
        "Oakland",
        "CA",
        "94607",
    ),
    _t(
        "USSEA", "Terminal 18", "T18", "X117", "T18", "1050 SW Spokane St", "Seattle", "WA", "98134"
    ),
    _t(
        "USTIW",
        "Husky Terminal",
        "Husky",
        "Z693",
        "HUSKY",
        "1101 Port of Tacoma Rd",
        "Tacoma",
        "WA",
        "98421",
        avail=False,
    ),
)

RAIL_TERMINALS: tuple[RailTerminal, ...] = (
    RailTerminal("USCHI", "BNSF Logistics Park Chicago", "LPC", "H572"),
    RailTerminal("USMEM", "BNSF Memphis Intermodal Facility", "BNSF MEM", "L119"),
    RailTerminal("USDAL", "UP Dallas Intermodal Terminal", "DIT", "P224"),
    RailTerminal("USMKC", "BNSF Kansas City Intermodal", "KCI", "M037"),
    RailTerminal("USATL", "NS Austell Intermodal", "Austell", "K610"),
    RailTerminal("USCMH", "CSX Columbus Intermodal", "CSX CMH", "D218"),
)

# Rail carrier for each inland destination (index aligned with INLAND): pod leg, inland leg.
INLAND_RAIL: tuple[tuple[str, str], ...] = (
    ("BNSF", "BNSF"),
    ("BNSF", "BNSF"),
    ("UPRR", "UPRR"),
    ("BNSF", "BNSF"),
    ("NSRR", "NSRR"),
    ("CSXT", "CSXT"),
)

CARRIERS: tuple[Carrier, ...] = (
    Carrier("MSCU", "Mediterranean Shipping Company", "MSC", "MSC", True),
    Carrier("MEDU", "Mediterranean Shipping Company", "MSC", "MSC", True),
    Carrier("MAEU", "Maersk", "Maersk", "MAERSK", True),
    Carrier("CMDU", "CMA CGM", "CMA CGM", "CMA CGM", False),
    Carrier("COSU", "COSCO", "COSCO", "COSCO SHIPPING", False),
    Carrier("HLCU", "Hapag-Lloyd", "Hapag-Lloyd", "", True),
    Carrier("ONEY", "Ocean Network Express", "ONE", "ONE", False),
    Carrier("EGLV", "Evergreen Marine Corporation", "Evergreen", "EVER", False),
    Carrier("HDMU", "Hyundai Merchant Marine", "HMM", "HMM", False),
    Carrier("YMLU", "Yang Ming Marine Transport", "Yang Ming", "YM", False),
    Carrier("ZIMU", "ZIM Integrated Shipping Services", "ZIM", "ZIM", True),
    Carrier("OOLU", "Orient Overseas Container Line", "OOCL", "OOCL", False),
)
CARRIER_WEIGHTS: tuple[int, ...] = (10, 4, 14, 11, 10, 8, 9, 9, 5, 5, 4, 7)

VESSEL_WORDS: tuple[str, ...] = (
    "ANISHA",
    "FORWARD",
    "SHIVLING",
    "AURORA",
    "HARMONY",
    "GENEVA",
    "TRIUMPH",
    "PEGASUS",
    "BRILLIANCE",
    "ORION",
    "ATLAS",
    "SERENITY",
    "HORIZON",
    "CHAMPION",
    "MERIDIAN",
    "VOYAGER",
    "PIONEER",
    "SPLENDOR",
    "ZENITH",
    "GALAXY",
    "LIBERTY",
    "PHOENIX",
    "SOVEREIGN",
    "TRITON",
)

CUSTOMERS: tuple[str, ...] = (
    "Sodor Steamworks",
    "Acme Home Goods",
    "Blue Ridge Outfitters",
    "Cascade Furniture Co",
    "Delta Kitchenware",
    "Evergrove Toys",
    "Fairway Sporting Goods",
    "Golden Gate Apparel",
    "Harbor Light Electronics",
    "Ironwood Tools",
    "Juniper Garden Supply",
    "Keystone Auto Parts",
    "Lakeside Lighting",
    "Maple Leaf Textiles",
    "Northstar Appliances",
    "Oakridge Flooring",
    "Pinecrest Pet Supply",
    "Quarry Stoneware",
    "Redwood Bicycles",
    "Summit Outdoor Gear",
    "Tidewater Beverages",
    "Union Square Stationery",
    "Valley Fresh Foods",
    "Westport Home Decor",
)

EQUIPMENT_TYPES: tuple[str, ...] = ("dry", "reefer", "open top", "flat rack", "bulk", "tank")
EQUIPMENT_TYPE_WEIGHTS: tuple[int, ...] = (86, 7, 2, 2, 1, 2)
EQUIPMENT_LENGTHS: tuple[int, ...] = (10, 20, 40, 45)
EQUIPMENT_LENGTH_WEIGHTS: tuple[int, ...] = (1, 30, 62, 7)
EQUIPMENT_HEIGHTS: tuple[str, ...] = ("standard", "high_cube")

HOLD_NAMES: tuple[str, ...] = ("freight", "customs", "USDA", "TMF", "VACIS", "other")
HOLD_WEIGHTS: tuple[int, ...] = (25, 30, 6, 14, 10, 15)
OTHER_HOLD_TEXT: tuple[str, ...] = (
    "Line hold - documentation",
    "CTF fee unpaid",
    "Terminal exam pending",
    "Chassis hold",
    "Bonded move pending",
    "FDA review",
)
CUSTOMS_HOLD_TEXT: tuple[str | None, ...] = (None, "CBP hold", "Customs exam ordered", None)

STOP_REASONS: tuple[str, ...] = (
    "all_containers_terminated",
    "past_arrival_window",
    "past_full_out_window",
    "no_updates_at_line",
    "cancelled_by_user",
    "booking_cancelled",
)

TERMINAL_LOCATIONS: tuple[str, ...] = ("Yard", "Grounded", "On Wheels", "Rail Yard", "Stack")
