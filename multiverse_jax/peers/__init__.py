"""Reference simulators run side by side with this one (``htsim``) and the seeded traffic
they run (``scenarios``): see the README's "Side by side with htsim"."""
