"""specnotes: the helper package of "Speculative decoding is a bandwidth trade".

Light modules (``hardware``, ``cost``) import nothing heavy; ``measure``, ``model``,
``sampling`` and ``generate`` need torch. Import the submodule you need.
"""

__version__ = "0.1.0"
