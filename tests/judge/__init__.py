"""Tests of clawdesk/judge/: parsing, votes, the judge methods and the teacher prompt."""
