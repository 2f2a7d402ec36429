"""The analytic model: the accelerator table (``hardware``), pass costs, E[N] and S(B) (``cost``), context
length (``context``) and mixtures of experts (``moe``). Pure Python and numpy, no torch; imports only
``specnotes.validate``. A calibration is passed into the time functions, never read here."""
