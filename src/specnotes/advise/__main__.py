"""python -m specnotes.advise"""
import sys

from specnotes.advise import main

sys.exit(main())
