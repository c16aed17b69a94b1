# hostile_templates.sh - chat templates written to hurt, for the tests that
# feed them to the CLI (tokenizer_hostile.sh) and to the server
# (serve_hostile_template.sh). Sourced after common.sh; each function calls
#   CALLBACK NAME NEEDLE TEMPLATE
# once per case, where the template must fail with one error line holding
# NEEDLE:
#   hostile_load_cases CALLBACK    refused when the template is read: integer
#       literals past 64 bits and 30,000-deep (or 3,000-deep) nesting of every
#       construct;
#   hostile_render_cases CALLBACK  read fine, refused while rendering:
#       integer overflow in every operator and in range(), data nested
#       100,000 deep, repetition of empty strings and lists by huge counts,
#       super-linear work (unique, in, sort, replace, join, split, count,
#       strip, startswith, length, equality of a 2^60-node value).
# Every case ends within the interpreter's budget of work and memory.

# chain N HEAD PIECE TAIL: HEAD PIECE*N TAIL
chain() {
  local s
  s=$(printf "%${1}s" "" | sed "s/ /$3/g")
  printf '%s%s%s' "$2" "$s" "$4"
}

# M = 2^63 - 1, computed without an overflowing literal
HOSTILE_M='{% set M = 2**62 + (2**62 - 1) %}'
HOSTILE_DEEP="the template nests too deeply"
HOSTILE_STEPS="ran more than"

hostile_load_cases() {
  local cb=$1 deep=$HOSTILE_DEEP N=30000
  $cb "integer literal" "integer literal too large" '{{ 9223372036854775808 }}'
  $cb "chained +" "$deep" "$(chain $N '{{ 1' ' + 1' ' }}')"
  $cb "chained ~" "$deep" "$(chain $N "{{ 'a'" " ~ 'a'" ' }}')"
  $cb "chained *" "$deep" "$(chain $N '{{ 1' ' * 1' ' }}')"
  $cb "chained and" "$deep" "$(chain $N '{{ 1' ' and 1' ' }}')"
  $cb "chained or" "$deep" "$(chain $N '{{ 0' ' or 0' ' }}')"
  $cb "chained filters" "$deep" "$(chain $N '{{ 1' '|string' ' }}')"
  $cb "chained attributes" "$deep" "$(chain $N '{{ messages' '.a' ' }}')"
  $cb "chained subscripts" "$deep" "$(chain $N '{{ messages' '[0]' ' }}')"
  $cb "chained calls" "$deep" "$(chain $N '{{ range' '()' ' }}')"
  $cb "chained conditionals" "$deep" "$(chain 3000 '{{ 1' ' if 1' ' }}')"
  $cb "nested else branches" "$deep" "$(chain 3000 '{{ ' '1 if 0 else ' '1 }}')"
  $cb "not chain" "$deep" "$(chain $N '{{ ' 'not ' '1 }}')"
  $cb "unary minus chain" "$deep" "$(chain $N '{{ ' '- ' '1 }}')"
  $cb "parentheses" "$deep" "$(chain 3000 '{{ ' '(' '1')$(chain 3000 '' ')' ' }}')"
  $cb "nested lists" "$deep" "$(chain 3000 '{{ ' '[' '1')$(chain 3000 '' ']' ' }}')"
  $cb "nested dicts" "$deep" "$(chain 3000 '{{ ' "{'a': " '1')$(chain 3000 '' '}' ' }}')"
  $cb "nested statements" "$deep" "$(chain 3000 '' '{% if 1 %}' 'x')$(chain 3000 '' '{% endif %}' '')"
}

hostile_render_cases() {
  local cb=$1 M=$HOSTILE_M steps=$HOSTILE_STEPS
  # integer overflow, in every operator and in range
  $cb "+ overflow" "integer overflow in '+'" '{{ 9223372036854775807 + 1 }}'
  $cb "- overflow" "integer overflow in '-'" '{{ -9223372036854775807 - 2 }}'
  $cb "* overflow" "integer overflow in '*'" '{{ 4611686018427387904 * 2 }}'
  $cb "// overflow" "integer overflow in '//'" '{{ (-9223372036854775807 - 1) // -1 }}'
  $cb "** overflow" "integer overflow in '**'" '{{ 3 ** 9223372036854775807 }}'
  $cb "unary - overflow" "integer overflow in unary '-'" '{{ -(-9223372036854775807 - 1) }}'
  $cb "sum overflow" "integer overflow in '+'" '{{ [9223372036854775807, 1]|sum }}'
  $cb "range too long" "range() is too long" "$M{{ range(-M - 1, M)|length }}"
  # range(1, M, M) is [1], whose length is raised as the error: a wrong
  # length (or a crash) cannot pass
  $cb "range overflow" "raise_exception: range(1, M, M) has 1 items" \
    "$M{{ raise_exception('range(1, M, M) has ' ~ (range(1, M, M)|length) ~ ' items') }}"
  # data nested at render time
  $cb "nested data compared" "nests more than" \
    '{% set ns = namespace(a=[]) %}{% for i in range(100000) %}{% set ns.a = [ns.a] %}{% endfor %}{{ ns.a < ns.a }}'
  $cb "nested data equal" "nests more than 100 levels" \
    '{% set ns = namespace(a=[]) %}{% for i in range(100000) %}{% set ns.a = [ns.a] %}{% endfor %}{{ ns.a == ns.a }}'
  # repetition by huge counts, even of nothing
  $cb "'' * 10**18" "$steps" "{{ '' * 10**18 }}"
  $cb "10**18 * ''" "$steps" "{{ 10**18 * '' }}"
  $cb "[] * 10**18" "$steps" '{{ ([] * 10**18)|length }}'
  $cb "'x' * 10**18" "a repeated value is too long" "{{ 'x' * 10**18 }}"
  $cb "repetition in a loop" "$steps" "{% for i in range(1000000) %}{{ '' * 1000000 }}{% endfor %}"
  # super-linear work on large inputs: the work budget or the memory limit
  local big="{% set s = 'a' * 1000000 %}{% set l = range(1000000)|list %}"
  local lo="$big{% for i in range(100000) %}" le='{% endfor %}' more="more than"
  $cb "unique of 3M" "$more" '{{ range(3000000)|unique|length }}'
  $cb "in a list, repeatedly" "$more" "$lo{% if -1 in l %}{% endif %}$le"
  $cb "in a string, repeatedly" "$more" "$lo{% if 'b' in s %}{% endif %}$le"
  $cb "sort, repeatedly" "$more" "$lo{% set x = l|sort %}$le"
  $cb "replace, repeatedly" "$more" "$lo{% set x = s.replace('b', 'c') %}$le"
  $cb "join of empties, repeatedly" "$more" \
    "{% set e = [''] * 1000000 %}{% for i in range(100000) %}{% set x = e|join %}{% endfor %}"
  $cb "split, repeatedly" "$more" "$lo{% set x = s.split('b') %}$le"
  $cb "count, repeatedly" "$more" "$lo{% set x = s.count('a') %}$le"
  $cb "strip by many chars" "$more" "{{ ('a' * 1000000).strip('b' * 100000 + 'a')|length }}"
  $cb "startswith, repeatedly" "$more" "$lo{% set x = s.startswith(s) %}$le"
  $cb "length of a string, repeatedly" "$more" "$lo{% set x = s|length %}$le"
  $cb "a 2^60-node value compared" "$more" \
    '{% set ns = namespace(a=[1]) %}{% for i in range(60) %}{% set ns.a = [ns.a, ns.a] %}{% endfor %}{{ ns.a == ns.a }}'
}
