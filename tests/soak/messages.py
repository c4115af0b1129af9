"""What the virtual users say: questions of the demo knowledge base, and remember requests with a marker."""

from __future__ import annotations

import re

QUESTIONS = [
    "What does travel insurance cover for medical costs abroad?",
    "How do I report a car body claim?",
    "Can I cancel my policy and get a refund?",
    "Can I pay my premium in instalments?",
    "When do I need to renew my home insurance?",
    "What does third-party liability insurance cover?",
    "بیمه مسافرتی هزینه درمان در خارج از کشور را تا چه سقفی پوشش می‌دهد؟",
    "چطور خسارت بدنه خودرو را اعلام کنم؟",
    "I want to talk to a person, please.",
    "qwrt zxcv plmk?",
]
REMEMBER = "What does travel insurance cover abroad? Please remember that my favourite colour is teal {marker}."
# `mk<user>g<generation>n<send>`: whose fact it is, and which erasure ended it.
MARKER = re.compile(r"mk(\d+)g(\d+)n\d+")
