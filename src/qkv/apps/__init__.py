"""The applications: text in, text out (`Translator`), scoring, the demo and the command line."""
