"""Models from and to other toolkits: Marian / OPUS-MT import."""
