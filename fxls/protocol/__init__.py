"""The contract between the fxls server and its worker: standard library only.

Both sides import this package and nothing else of each other: the data model (``model``),
its JSON codec (``codec``), length-prefixed frames (``frames``), the diagnostic catalogue
(``catalogue``) and source positions (``positions``).
"""
