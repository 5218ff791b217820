"""LTI 1.3 Advantage: the lab as a tool in an LMS (launch, deep linking, grades, rosters), on django-lti."""
