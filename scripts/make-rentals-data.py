"""Writes the data of examples/rentals.kdl: rentals.csv, a table as people keep one.

Two years of a bike-sharing scheme's days (the shape of the UCI bike-sharing table, made
up here so that it ships with no licence): the date as written (`2023-04-01`), the
weather and whether the day was a holiday as words (`clear`, `rain`; `yes`, `no`), the
temperature, humidity and wind with gaps (`NA`, or an empty field, where a sensor
failed), and the day's rentals, the label. Rentals follow the season, the weekday,
the temperature and the weather, with noise.

Usage: python make-rentals-data.py OUT.csv   (deterministic: seeded)
"""

import datetime
import math
import os
import sys

import numpy as np

DAYS = 730
WEATHER = ["clear", "cloudy", "rain", "snow"]


def main(out: str) -> None:
    rng = np.random.default_rng(35)
    first = datetime.date(2023, 1, 1)
    rows = []
    for t in range(DAYS):
        day = first + datetime.timedelta(days=t)
        season = -math.cos(2 * math.pi * (day.timetuple().tm_yday - 15) / 365)
        temp = 12 + 11 * season + rng.normal(0, 3)
        humidity = float(np.clip(65 - 10 * season + rng.normal(0, 12), 15, 100))
        wind = float(abs(rng.normal(12, 6)))
        p_snow = 0.15 if temp < 2 else 0.0
        weather = rng.choice(WEATHER, p=[0.5 - p_snow / 2, 0.3, 0.2 - p_snow / 2, p_snow])
        holiday = "yes" if (day.month, day.day) in {(1, 1), (5, 1), (7, 4), (12, 25), (12, 26)} else "no"
        weekend = day.weekday() >= 5
        rentals = (
            2600
            + 160 * temp
            - 12 * (humidity - 60)
            - 25 * wind
            + {"clear": 700, "cloudy": 250, "rain": -1400, "snow": -2200}[weather]
            + (-500 if weekend else 300)
            + (-900 if holiday == "yes" else 0)
            + 600 * (t / DAYS)
            + rng.normal(0, 250)
        )
        cell = lambda v, digits: "NA" if rng.random() < 0.03 else f"{v:.{digits}f}"
        rows.append(
            [
                day.isoformat(),
                # A few days whose weather was not recorded: an empty field.
                "" if rng.random() < 0.02 else str(weather),
                holiday,
                cell(temp, 1),
                cell(humidity, 0),
                cell(wind, 1),
                str(max(0, int(round(rentals)))),
            ]
        )
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        f.write("date,weather,holiday,temp,humidity,wind,rentals\n")
        for row in rows:
            f.write(",".join(row) + "\n")
    os.replace(tmp, out)


if __name__ == "__main__":
    main(sys.argv[1])
