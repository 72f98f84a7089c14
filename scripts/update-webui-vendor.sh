#!/usr/bin/env bash
# Updates the chat page's vendored libraries (httpapi/webui/vendor) from npm:
# each package is fetched with `npm pack` at the version pinned below into a
# temporary directory, and only its built files and licence are copied. The
# page then needs no build step and no network at run time.
#
#   scripts/update-webui-vendor.sh            # the versions pinned below
#   MARKED=18.3.0 scripts/update-webui-vendor.sh   # another version of one
#
# After running it, check the page (go test ./httpapi/webui/ runs it in
# Chromium) and commit httpapi/webui/vendor with VERSIONS.md.
set -euo pipefail
cd "$(dirname "$0")/.."

MARKED=${MARKED:-18.3.0}
DOMPURIFY=${DOMPURIFY:-3.5.0}
HIGHLIGHT=${HIGHLIGHT:-11.12.0}   # @highlightjs/cdn-assets: the prebuilt common-languages bundle
KATEX=${KATEX:-0.19.1}

dest=httpapi/webui/vendor
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fetch() { # fetch NAME VERSION -> unpacked in $tmp/NAME-dir/package
  local dir="$tmp/$(echo "$1" | tr '/@' '__')"
  mkdir -p "$dir"
  (cd "$dir" && npm pack --silent "$1@$2" >/dev/null && tar xzf ./*.tgz)
  echo "$dir/package"
}

rm -rf "$dest"
mkdir -p "$dest/marked" "$dest/dompurify" "$dest/highlight" "$dest/katex/fonts"

p=$(fetch marked "$MARKED")
cp "$p/lib/marked.umd.js" "$dest/marked/marked.umd.js"
cp "$p/LICENSE" "$dest/marked/LICENSE"

p=$(fetch dompurify "$DOMPURIFY")
cp "$p/dist/purify.min.js" "$dest/dompurify/purify.min.js"
cp "$p/LICENSE" "$dest/dompurify/LICENSE"

p=$(fetch @highlightjs/cdn-assets "$HIGHLIGHT")
cp "$p/highlight.min.js" "$dest/highlight/highlight.min.js"
cp "$p/styles/github.min.css" "$dest/highlight/github.min.css"
cp "$p/styles/github-dark.min.css" "$dest/highlight/github-dark.min.css"
cp "$p/LICENSE" "$dest/highlight/LICENSE"

p=$(fetch katex "$KATEX")
cp "$p/dist/katex.min.js" "$dest/katex/katex.min.js"
cp "$p/dist/katex.min.css" "$dest/katex/katex.min.css"
cp "$p/dist/fonts/"*.woff2 "$dest/katex/fonts/" # every browser the page supports reads woff2
cp "$p/LICENSE" "$dest/katex/LICENSE"
# Only woff2 is shipped: drop the woff and ttf alternatives from the CSS.
sed -i -E 's/,url\(fonts\/[^)]*\.(woff|ttf)\) format\("(woff|truetype)"\)//g' "$dest/katex/katex.min.css"

cat > "$dest/VERSIONS.md" <<MD
# Vendored libraries of the chat page

Updated by \`scripts/update-webui-vendor.sh\` (npm pack, built files only); do not edit by hand.

| library | version | files | licence |
| --- | --- | --- | --- |
| [marked](https://github.com/markedjs/marked) (Markdown) | $MARKED | marked/marked.umd.js | MIT, marked/LICENSE |
| [DOMPurify](https://github.com/cure53/DOMPurify) (HTML sanitizer) | $DOMPURIFY | dompurify/purify.min.js | Apache-2.0 or MPL-2.0, dompurify/LICENSE |
| [highlight.js](https://github.com/highlightjs/highlight.js) (common languages, @highlightjs/cdn-assets) | $HIGHLIGHT | highlight/highlight.min.js, github(-dark).min.css | BSD-3-Clause, highlight/LICENSE |
| [KaTeX](https://github.com/KaTeX/KaTeX) (math) | $KATEX | katex/katex.min.js, katex.min.css, fonts/*.woff2 | MIT, katex/LICENSE |
MD
du -sb "$dest"
