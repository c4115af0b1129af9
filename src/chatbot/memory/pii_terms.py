"""Keep the keyword patterns of the PII guard: payment secrets, card expiry and health terms.

Every pattern runs on `pii.normalize_for_pii` output: casefolded, Persian letters folded
(ي→ی, ك→ک, أ→ا), diacritics and tatweel removed, zero-width characters turned into spaces.
So multi-word Persian terms allow `\\s*` between words ("شیمی‌درمانی", "شیمی درمانی" and
"شیمیدرمانی" all match), and a left word boundary keeps "مسقط" from reading as "سقط".
Product words of health insurance (بیمه تکمیلی, بیمه درمان, health plan, medical insurance)
are deliberately absent: they describe what a user buys, not their health.
"""

from __future__ import annotations

import re

# Passwords, PINs, CVV2, one-time codes. Bare "رمز" is how Persian speakers say "password"
# ("رمز کارتم ..."); its compounds for encryption and crypto-currency are excluded.
_SECRET_TERMS = (
    r"\bcvv\s*2?\b", r"\bcvc\s*2?\b", r"\bcsc\b", r"\bcvv\d", r"\bpass\s*words?\b", r"\bpasscodes?\b",
    r"\bpins?\b", r"\bpin\s*codes?\b", r"\botps?\b", r"one[\s-]*time\s*(?:pass\s*word|code|pin)",
    r"\bsecurity\s*code", r"\bverification\s*code", r"\b2fa\b", r"\blog\s*in\s*code",
    r"(?<!\w)رمز(?!\s*(?:ارز|گذاری|نگاری|گشایی))", r"(?<!\w)پسورد", r"(?<!\w)کلمه\s*(?:ی\s*)?عبور",
    r"(?<!\w)کد\s*(?:تا?یید|تائید|امنیتی|یک\s*بار\s*مصرف|پویا)", r"یک\s*بار\s*مصرف", r"(?<!\w)سی\s*وی\s*وی",
)
SECRET_PATTERN = re.compile("|".join(_SECRET_TERMS))

EXPIRY_PATTERN = re.compile(
    r"\bexp(?:iry|iration|ires?|ired)?\b|\bvalid\s*(?:thru|through|until)\b|انقضا|اعتبار\s*کارت"
)

# English health terms: conditions, medications, diagnoses, procedures, pregnancy. "Injury"
# alone is a cover name ("bodily injury", "pays for injury to others"), so only a person's
# injury counts.
_HEALTH_EN = (
    r"diabet\w*", r"cancers?", r"tumou?rs?", r"chemo\w*", r"radiotherapy", r"asthma\w*",
    r"hypertension", r"high\s*blood\s*pressure", r"blood\s*pressure", r"blood\s*sugar",
    r"heart\s*(?:attack|disease|condition|failure|surgery|problems?)",
    r"(?:had|suffered|after)\s*an?\s*stroke",
    r"epilep\w*", r"seizures?", r"hepatitis", r"hiv", r"depress(?:ion|ed|ive)", r"anxiety",
    r"bipolar", r"schizophreni\w*", r"autis(?:m|tic)", r"adhd", r"ptsd", r"pregnan\w*", r"miscarriage",
    r"infertil\w*", r"ivf", r"surger(?:y|ies)", r"surgical", r"operated\s*on", r"diagnos(?:ed|is|es)",
    r"prescri(?:ption|ptions|bed)", r"medications?", r"medicines?", r"meds", r"pills?", r"insulin",
    r"metformin", r"antidepressants?", r"dialysis", r"transplant\w*", r"kidney\s*(?:disease|failure|stones?)",
    r"liver\s*(?:disease|failure)", r"cirrhosis", r"multiple\s*sclerosis", r"alzheimer\w*", r"dementia",
    r"parkinson\w*", r"arthritis", r"allerg(?:y|ies|ic)", r"disabilit(?:y|ies)", r"disabled", r"wheelchair",
    r"thyroid", r"cholesterol", r"covid\w*", r"coronavirus", r"infections?", r"physiotherapy",
    r"psychiatr\w*", r"psycholog(?:ist|ists)", r"therapist", r"mental\s*(?:health|illness|disorder)",
    r"migraines?", r"injured", r"(?:my|his|her|our|their)\s+injur(?:y|ies)", r"whiplash", r"hospitali[sz]ed",
    r"admitted\s*to\s*(?:the\s*)?hospital",
    r"sick", r"sickness", r"illness(?:es)?", r"(?:am|is|fell|chronically|terminally)\s+ill", r"diseases?",
    r"disorders?", r"syndrome", r"chronic", r"biops(?:y|ies)", r"blood\s*tests?", r"mri", r"x-?rays?",
    r"fractur\w*", r"broken\s*(?:leg|arm|bone|wrist|ankle|hip)", r"rehab\w*", r"addict\w*", r"overdose",
    r"(?:under|in)\s*treatment", r"medical\s*(?:condition|history|records?)",
    r"health\s*(?:condition|problems?)",
    r"pre-?existing\s*conditions?", r"anemi[ac]", r"thalass(?:a|e)mia", r"lupus", r"ulcers?", r"c-?section",
    r"giving\s*birth", r"gave\s*birth",
)

# Persian health terms (normalised spelling; آ also matched without its madda).
_HEALTH_FA = (
    r"دیابت", r"قند\s*خون", r"مرض\s*قند", r"سرطان", r"تومور", r"شیمی\s*درمانی", r"پرتو\s*درمانی",
    r"رادیوتراپی", r"[آا]سم(?!ان)", r"فشار\s*خون", r"قلبی", r"سکته", r"صرع", r"ایدز", r"اچ\s*[آا]ی\s*وی",
    r"هپاتیت", r"افسردگی", r"افسرده", r"اضطراب", r"دو\s*قطبی", r"اسکیزوفرنی", r"اوتیسم", r"باردار",
    r"حامله", r"حاملگی", r"سقط", r"جراحی", r"بیمار(?!ستان)", r"مریض", r"دارو", r"قرص", r"انسولین",
    r"متفورمین", r"دیالیز", r"(?:نارسایی|پیوند|سنگ|بیماری)\s*(?:کلیه|کبد)", r"پیوند\s*(?:قلب|مغز|عضو)",
    r"ام\s*اس\s*(?:دارم|دارد|داره|گرفتم|هستم)", r"مولتیپل\s*اسکلروزیس", r"[آا]لزایمر", r"زوال\s*عقل",
    r"پارکینسون", r"[آا]رتروز", r"روماتیسم", r"[آا]لرژی", r"حساسیت\s*(?:دارویی|غذایی|فصلی)",
    r"معلول", r"معلولیت", r"تیروئید", r"کلسترول", r"کرونا", r"کووید", r"عفونت", r"فیزیوتراپی",
    r"روان\s*پزشک", r"روان\s*شناس", r"روان\s*درمان", r"سلامت\s*روان", r"میگرن", r"نازایی", r"ناباروری",
    r"[آا]ی\s*وی\s*اف", r"شکستگی", r"بستری", r"ام\s*[آا]ر\s*[آا]ی", r"نمونه\s*برداری", r"بیوپسی",
    r"[آا]زمایش\s*خون", r"اعتیاد", r"مصدوم", r"تشخیص\s*(?:بیماری|پزشک|سرطان)",
    r"(?:پزشک|دکتر)\s*(?:من\s*|ام\s*)?تشخیص", r"تحت\s*درمان", r"نسخه\s*(?:پزشک|دارو)",
    r"کم\s*خونی", r"تالاسمی", r"هموفیلی", r"لوپوس", r"کبد\s*چرب", r"سیروز", r"زخم\s*معده", r"سزارین",
    r"زایمان", r"ویلچر", r"نوار\s*قلب", r"[آا]نژیو",
)

# A term starts a word (`\b` before a letter is `(?<!\w)`); English terms also end one.
# Written as one left boundary and a letter ahead, then the alternatives, instead of a
# boundary per alternative: the regex engine then tries the ~200 terms only where a word
# starts, not at every position. The same matches, 15 to 90 times faster on the 10,000
# characters the guard reads at most (most on digit-and-dot text, where every position
# is a boundary).
HEALTH_PATTERN = re.compile(
    r"(?<!\w)(?=[^\W\d_])(?:(?:" + "|".join(_HEALTH_EN) + r")\b" + "|" + "|".join(_HEALTH_FA) + ")"
)

# Upper-case acronyms whose lower-case forms are ordinary words ("aids" helps, "ms" is a title).
HEALTH_ACRONYMS_PATTERN = re.compile(r"\b(?:AIDS|COPD|OCD)\b")

# Words in an extractor's own category label that mean "this is health information".
HEALTH_CATEGORY_WORDS = frozenset(
    {
        "health", "medical", "medication", "medications", "medicine", "diagnosis", "condition", "conditions",
        "illness", "disease", "pregnancy", "treatment", "mental", "disability", "سلامت", "پزشکی", "بیماری",
        "دارو", "درمان",
    }
)
