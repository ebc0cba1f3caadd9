"""Test-support builders shipped with the package so tests and bench scripts share them."""
