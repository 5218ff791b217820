// The deep-linking response goes back to the LMS at once; the button stays for a browser without scripts.
document.getElementById("deep-link-return").submit();
