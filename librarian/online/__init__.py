"""Online curation: a served workspace that curates itself from the questions readers ask (versions, rounds, logs)."""
