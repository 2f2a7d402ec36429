"""What the book's pages show: the house style's figures (``plots``), the S(B) explorers (``widgets``), the
intro's figure (``thesis``), self-checking problems (``exercises``), glue (``notebook``) and re-execution
(``refresh``). Imports ``serve`` and below, never ``advise`` or ``bench``."""
