"""`python -m alnair.injector` runs the webhook."""

from . import main

main()
