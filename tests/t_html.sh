#!/usr/bin/env bash
# t_html.sh - `pipec sim --html` / `pipec diff --html`: the interactive timeline, opened
# in headless Chromium. A screenshot is checked for structure (one band of backward
# boxes per stage); a script injected into a copy of the page moves the mouse over ops
# and memory strips, clicks the zoom buttons and the variant picker, and reads what the
# page shows. Skipped, with a message, when Chromium is absent (`make deps` installs it).
cd "$(dirname "$0")/.."
. tests/lib.sh
export PIPEC_STDLIB=${PIPEC_STDLIB:-$PWD/stdlib}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
G=tests/golden/sim

"$PIPEC" sim $G/tiny_1f1b.pipe --html "$tmp/t.html" >/dev/null
check "sim --html writes a page" grep -q '^<!DOCTYPE html>' "$tmp/t.html"
check "the page is self-contained (no network)" bash -c "! grep -Eq '(src|href)=\"?(https?:)?//' '$tmp/t.html'"
"$PIPEC" diff $G/tiny_1f1b.pipe $G/tiny_gpipe.pipe --html "$tmp/d.html" >/dev/null
# File names become JSON strings in the page's script: quotes escaped, and "<" written
# \u003c so that no name can close the script element.
cp $G/tiny_1f1b.pipe "$tmp/a&b\".pipe"
cp $G/tiny_gpipe.pipe "$tmp/x<y>.pipe"
"$PIPEC" diff "$tmp/a&b\".pipe" "$tmp/x<y>.pipe" --html "$tmp/esc.html" >/dev/null 2>&1
check "diff --html, special names: the A label, quote escaped" grep -qF '"label":"A: '"$tmp"'/a&b\".pipe"' "$tmp/esc.html"
check "diff --html, special names: '<' written \u003c" grep -qF 'x\u003c' "$tmp/esc.html"
check "diff --html, special names: no extra </script" test "$(grep -c '</script' "$tmp/esc.html")" = "$(grep -c '</script' "$tmp/d.html")"
# A backslash is escaped, a control character (a tab) written \u0009.
cp $G/tiny_1f1b.pipe "$tmp/b\\s"$'\t'"t.pipe"
"$PIPEC" diff $G/tiny_1f1b.pipe "$tmp/b\\s"$'\t'"t.pipe" --html "$tmp/esc2.html" >/dev/null 2>&1
check "diff --html, special names: backslash and tab escaped" grep -qF '"label":"B: '"$tmp"'/b\\s\u0009t.pipe"' "$tmp/esc2.html"
# Without a memory budget the page's budget is null (no budget line is drawn).
"$PIPEC" sim $G/swap.pipe --html "$tmp/nb.html" >/dev/null
check "sim --html without a budget: budget null" grep -qF '"budget":null' "$tmp/nb.html"
check "sim --html with a budget: the budget in bytes" grep -qF '"budget":42949672960' "$tmp/t.html"

chrome=""
for c in chromium chromium-browser google-chrome chrome headless_shell; do
    command -v "$c" >/dev/null 2>&1 && { chrome=$c; break; }
done
if [ -z "$chrome" ]; then
    skip "html in Chromium" "Chromium is not installed (make deps installs it)"
    finish; exit
fi
run_chrome() { # ARGS...: headless, no sandbox (root in containers), quiet
    timeout 120 "$chrome" --headless --no-sandbox --disable-gpu --hide-scrollbars \
        --window-size=1200,800 "$@" 2>/dev/null
}

# --- interaction: an injected script drives the page and reports in #result --------
cat >"$tmp/drive.js" <<'EOF'
<script>
(function () {
  const out = {};
  const cvs = document.getElementById('tl'), box = cvs.getBoundingClientRect();
  function move(x, y) {
    cvs.dispatchEvent(new MouseEvent('mousemove', {clientX: box.left + x, clientY: box.top + y, bubbles: true}));
    const tip = document.getElementById('tip');
    return tip.hidden ? '' : tip.textContent;
  }
  // the op boxes as the page lays them out: hover the middle of each of stage 0's first
  // two ops, and of stage 3's first op
  const r0 = layout[0].rows[0], r3 = layout[3].rows[0];
  const mid = (r, i) => [X((r.ops[i][3] + r.ops[i][4]) / 2), r.y + r.h / 2];
  out.hover00 = move(...mid(r0, 0));
  out.hover01 = move(...mid(r0, 1));
  out.hover30 = move(...mid(r3, 0));
  out.mem0 = move(X(1), layout[0].memY + 10);
  out.nothing = move(5, 5);
  out.title = document.getElementById('title').textContent;
  out.k0 = k;
  document.getElementById('zoomin').click();
  out.k1 = k;
  out.after_zoom = move(...mid(r0, 1));
  document.getElementById('reset').click();
  out.k2 = k;
  const pick = document.getElementById('variant');
  out.variants = pick.hidden ? 1 : pick.options.length;
  if (!pick.hidden) {
    pick.value = '1';
    pick.dispatchEvent(new Event('change'));
    out.title_b = document.getElementById('title').textContent;
    out.hover_b = move(...mid(layout[0].rows[0], 4));
  }
  const pre = document.createElement('pre');
  pre.id = 'result';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>
EOF
for name in t d; do
    sed '/^<\/body><\/html>$/d' "$tmp/$name.html" >"$tmp/${name}_drive.html"
    cat "$tmp/drive.js" >>"$tmp/${name}_drive.html"
    echo '</body></html>' >>"$tmp/${name}_drive.html"
    run_chrome --dump-dom "file://$tmp/${name}_drive.html" >"$tmp/$name.dom"
    sed -n 's/.*<pre id="result">\(.*\)<\/pre>.*/\1/p' "$tmp/$name.dom" | python3 -c '
import html, sys; print(html.unescape(sys.stdin.read()))' >"$tmp/$name.json"
done
check "html: the page ran in Chromium" test -s "$tmp/t.json"
check "html: hover details, zoom, reset" python3 - "$tmp/t.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
# tiny_1f1b: f 1 ms, b 2 ms; stage 0 runs F0 F1 F2 F3 B0 ..., stage 3 starts F0 at 3 ms
assert r["hover00"] == "F0 \u2014 stage 0, micro-batch 0\nstart 0.000 ms, end 1.000 ms (1.000 ms)", r["hover00"]
assert r["hover01"].startswith("F1 \u2014 stage 0, micro-batch 1\nstart 1.000 ms, end 2.000 ms"), r["hover01"]
assert r["hover30"].startswith("F0 \u2014 stage 3, micro-batch 0\nstart 3.000 ms"), r["hover30"]
assert r["mem0"].startswith("stage 0 memory at ") and "of 40.0 GiB" in r["mem0"], r["mem0"]
assert r["nothing"] == "", r["nothing"]
assert "tiny_1f1b" in r["title"] and "makespan 33.00 ms" in r["title"], r["title"]
assert abs(r["k1"] / r["k0"] - 1.5) < 1e-9 and r["k2"] == r["k0"], (r["k0"], r["k1"], r["k2"])
assert r["after_zoom"].startswith("F1 \u2014 stage 0"), r["after_zoom"]
assert r["variants"] == 1
EOF
check "html (diff): the variant picker switches to B" python3 - "$tmp/d.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["variants"] == 2, r
assert "tiny_1f1b" in r["title"] and "tiny_gpipe" in r["title_b"], (r["title"], r["title_b"])
# GPipe: stage 0 runs all eight forwards first, so its fifth op is F4
assert r["hover_b"].startswith("F4 \u2014 stage 0"), r["hover_b"]
EOF

# --- structure of a screenshot: one band of backward (green) boxes per stage ----------
run_chrome --screenshot="$tmp/t.png" "file://$tmp/t.html" >/dev/null
check "html: screenshot, one band of B boxes per stage" python3 - "$tmp/t.png" 4 <<'EOF'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n"
pos, idat, w = 8, b"", 0
while pos < len(data):
    n, typ = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if typ == b"IHDR":
        w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
        assert depth == 8 and ctype in (2, 6), (depth, ctype)
        bpp = 3 if ctype == 2 else 4
    elif typ == b"IDAT":
        idat += body
    pos += 12 + n
raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
for y in range(h):
    f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):
        a = line[i - bpp] if i >= bpp else 0
        b, c = prev[i], prev[i - bpp] if i >= bpp else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    rows.append(line); prev = line
green = (0x55, 0xA8, 0x68)
def count(line):
    return sum(1 for x in range(0, stride, bpp) if abs(line[x] - green[0]) < 6 and abs(line[x + 1] - green[1]) < 6 and abs(line[x + 2] - green[2]) < 6)
bands, inband = 0, False
for line in rows:
    g = count(line) > 20
    if g and not inband: bands += 1
    inband = g
assert bands == int(sys.argv[2]), bands
EOF
# --- every example's page runs in Chromium without a script error -------------------------
# Each page gets an error catcher before its scripts and a probe after them: the probe
# lays the page out, names every op with the page's own opName (the kind names, streams
# and chunk-wide flags come from the op table) and reports what it saw; together the
# examples must show every op kind.
cat >"$tmp/probe.js" <<'EOF'
<script>
(function () {
  const out = {errors: window.__errs || []};
  try {
    out.stages = layout.length;
    const kinds = {};
    let n = 0, bad = 0;
    for (const st of layout) for (const r of st.rows) for (const o of r.ops) {
      n++;
      const nm = opName(o);
      if (nm.indexOf('undefined') >= 0) bad++;
      kinds[KINDS[o[0]]] = 1;
    }
    out.ops = n; out.bad = bad; out.kinds = Object.keys(kinds);
  } catch (e) { out.errors.push(String(e)); }
  const host = window.parent.document, pre = host.createElement('pre');
  pre.className = 'result';
  pre.dataset.name = '@NAME@';
  pre.textContent = JSON.stringify(out);
  host.body.appendChild(pre);
})();
</script>
EOF
# All the example pages open in one Chromium run: each page (catcher, page, probe) is
# the srcdoc of an iframe of one host page; its probe appends its report, named after
# the example, to the host page, whose DOM Chromium dumps once.
: >"$tmp/kinds"
: >"$tmp/names"
for ex in examples/*.pipe; do
    name=$(basename "$ex" .pipe)
    if ! "$PIPEC" sim "$ex" --html "$tmp/ex_$name.html" --json >"$tmp/ex_$name.json" 2>/dev/null; then
        bad "html $name" "sim --html failed"; continue
    fi
    { sed -n '1,/<body>/p' "$tmp/ex_$name.html"
      echo '<script>window.__errs=[];window.addEventListener("error",e=>window.__errs.push(e.message));</script>'
      sed -n '/<body>/,$p' "$tmp/ex_$name.html" | sed '1d;/^<\/body><\/html>$/d'
      sed "s/@NAME@/$name/" "$tmp/probe.js"; echo '</body></html>'; } >"$tmp/ex_${name}_probe.html"
    echo "$name" >>"$tmp/names"
done
python3 - "$tmp" <<'EOF' >"$tmp/host.html"
import html, sys
d = sys.argv[1]
print('<!DOCTYPE html><html><body>')
for name in open(d + '/names').read().split():
    page = open('%s/ex_%s_probe.html' % (d, name)).read()
    print('<iframe width="1200" height="800" srcdoc="%s"></iframe>' % html.escape(page, quote=True))
print('</body></html>')
EOF
run_chrome --dump-dom "file://$tmp/host.html" >"$tmp/host.dom"
# Every report checked by one Python: a line "NAME ok" or "NAME WHY" per example.
python3 - "$tmp" <<'EOF' >"$tmp/verdicts"
import html, json, re, sys
d = sys.argv[1]
dom = open(d + '/host.dom').read()
got = {m.group(1): html.unescape(m.group(2))
       for m in re.finditer(r'<pre class="result" data-name="([^"]*)">([^<]*)</pre>', dom)}
kinds = open(d + '/kinds', 'a')
for name in open(d + '/names').read().split():
    try:
        assert name in got, "no report from the page"
        r = json.loads(got[name])
        j = json.load(open('%s/ex_%s.json' % (d, name)))
        assert not r["errors"], r["errors"]
        assert r["stages"] == j["stages"], (r["stages"], j["stages"])
        assert r["ops"] > 0 and r["bad"] == 0, r
        kinds.write(" ".join(r["kinds"]) + "\n")
        print(name, "ok")
    except Exception as e:
        print(name, repr(e)[:300].replace("\n", " "))
EOF
n=0
while read -r name why; do
    n=$((n + 1))
    if [ "$why" = ok ]; then ok; else bad "html $name" "$why"; fi
done <"$tmp/verdicts"
check "html: a verdict for every example page" test "$n" = "$(wc -l <"$tmp/names")"
check "html: the examples show every op kind" python3 - "$tmp/kinds" <<'EOF'
import sys
seen = set(open(sys.argv[1]).read().split())
want = {"F", "B", "W", "R", "SO", "SI", "OG", "LW", "RO"}
assert want <= seen, sorted(want - seen)
EOF

finish
