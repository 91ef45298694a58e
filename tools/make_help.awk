# `make help`: prints each make target with the comment block right above it (its description), in the
# order the files define them. A blank line or any other line between a comment and a target ends the
# comment; `.PHONY` lines do not.
FNR == 1 { doc = ""; if (NR == 1) print "make targets (make <target>; the README and docs/ say more):" }
/^# / { line = substr($0, 3); doc = (doc == "" ? line : doc " " line); next }
/^\.PHONY/ { next }
/^[a-z][a-z0-9_-]*:/ {
    target = $1
    sub(/:.*/, "", target)
    printf "  %-17s %s\n", target, (doc == "" ? "(undocumented)" : doc)
    doc = ""
    next
}
{ doc = "" }
