#!/usr/bin/env bash
# Builds attnlab's default training corpus (~21 MB of public-domain English prose) from Debian's
# SWORD packages, offline:
#   OUT_DIR/tdavid.txt  C. H. Spurgeon, The Treasury of David (commentary on the Psalms, 1869-1885)
#   OUT_DIR/web.txt     World English Bible (engWEB2015eb, with the deuterocanon)
#   OUT_DIR/kjv.txt     King James Version (engKJV2006eb)
# and beside each, NAME.groups: one line per document naming its group for the held-out split
# (`attnlab prepare --split groups`): the book for a Bible chapter ("Genesis"), except that each
# psalm is its own group, "Psalms 23", shared by its chapter in both translations and by the
# Treasury's commentary on it. A book is thus held out in both translations at once.
# Verse references, footnotes, Strong's markup, pilcrows and emphasis markers are stripped.
# Documents (a Bible chapter, a psalm's commentary) are separated by one blank line, which is what
# `attnlab prepare` splits train/val on (docs/data.md). Idempotent: existing non-empty outputs are
# kept. Each file is written to OUT.tmp and renamed, so an interrupted run leaves nothing half-done.
#
# usage: scripts/fetch_corpus.sh OUT_DIR
set -euo pipefail

if [[ $# -ne 1 || "$1" == -* ]]; then
  echo "usage: $0 OUT_DIR   (writes OUT_DIR/{tdavid,web,kjv}.txt)" >&2
  exit 2
fi
out=$1
mkdir -p "$out"

# --- the SWORD modules --------------------------------------------------------------------------
packages=(diatheke sword-comm-tdavid sword-text-web sword-text-kjv)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    echo "fetch_corpus: installing ${missing[*]}" >&2
    apt-get install -y --no-install-recommends "${missing[@]}" >&2 ||
      { apt-get update >&2 && apt-get install -y --no-install-recommends "${missing[@]}" >&2; }
  else
    echo "fetch_corpus: missing Debian packages: ${missing[*]}; run: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi

# --- cleaners (perl: the diatheke output needs balanced-bracket and multi-line handling) ------------

# Bible text, diatheke -f plain [-o f]. A verse is "Book C:V: text", poetry continues on further
# lines. Footnotes ("[4:1 or, lay with]", possibly nested brackets) are requested and then removed,
# because without them the module drops the space around the note ("Godcreated"). A blank line is
# written between chapters; text between a blank line and the next verse (a psalm's title) goes
# with that next verse, so it lands in the right chapter. Both modules repeat Psalm 145's title
# (and each psalm's title before each of its verses) up to Revelation, a module bug: a heading
# that repeats before consecutive verses is written once.
read -r -d '' BIBLE_CLEANER <<'PERL' || true
use strict; use warnings; use utf8;
binmode STDIN, ':encoding(UTF-8)'; binmode STDOUT, ':encoding(UTF-8)';
my $footnote = qr/(\[(?:[^\[\]]++|(?1))*\])/;
my $verse = qr/^\s*((?:[IV]+ )?[A-Z][a-z]+(?: of)?(?: [A-Z][a-z]+)?(?: \(Greek\))?) (\d+):(\d+):(?: (.*))?$/;
sub tidy { my $s = shift; $s =~ s/[ \t]+/ /g; $s =~ s/^ //; $s =~ s/ $//; return $s; }
my @items;   # [kind, text, chapter]: kind v = verse start, l = other text line, b = blank line
while (my $line = <STDIN>) {
  chomp $line;
  next if $line =~ /^\((?:engWEB2015eb|engKJV2006eb)\)$/;   # the module name diatheke appends
  $line =~ s{<title\b.*?</title>}{}g;                       # stray OSIS titles leaked by the module
  $line =~ s{<[^>]*>}{}g;                                   # any other markup
  $line =~ s/\s*(?=\[\s*\d+[:.]\d+(?:-\d+)?\s)$footnote\s*/ /g; # footnotes ("[1:1 ...]", "[1.4 ...]", "[11:15-16 ...]")
  $line =~ s/\[\s*\]//g;                                    # empty footnotes
  $line =~ s/¶//g;                                          # KJV paragraph marks
  if ($line =~ $verse) { push @items, ['v', tidy($4 // ''), "$1 $2"]; next; }
  my $text = tidy($line);
  push @items, length $text ? ['l', $text] : ['b'];
}
# A heading stands alone (after a blank line) right before a verse start. The module bug repeats
# the same heading before consecutive verse starts; a refrain never stands alone like that.
my %stuck;
my ($previous, $run) = ('', 0);
for my $i (0 .. $#items) {
  next unless $items[$i][0] eq 'v';
  my $j = $i - 1;
  $j-- while $j >= 0 && $items[$j][0] eq 'b';
  my $heading = ($j >= 0 && $items[$j][0] eq 'l' && ($j == 0 || $items[$j - 1][0] eq 'b')) ? $items[$j][1] : '';
  $items[$j][3] = 1 if $j >= 0 && $items[$j][0] eq 'l';   # this line precedes a verse start
  if (length $heading && $heading eq $previous) { $stuck{$heading} = 1 if ++$run >= 2; } else { $run = 1; }
  $previous = $heading;
}
open(my $groups, '>:encoding(UTF-8)', $ENV{GROUPS_OUT}) or die "cannot write $ENV{GROUPS_OUT}: $!";
my ($chapter, $last_heading, $after_blank, @pending) = ('', '', 0);
# A document starts at the first line printed after the chapter changed (a chapter whose verses
# are all empty prints nothing and starts none); its group is the book, or the psalm.
my ($open_chapter, $documents) = ('', 0);
sub emit {
  my $text = shift;
  if ($chapter ne $open_chapter) {
    print "\n" if $documents++;
    my ($book) = $chapter =~ /^(.*) \d+$/;
    print $groups ($book eq 'Psalms' ? $chapter : $book), "\n";
    $open_chapter = $chapter;
  }
  print "$text\n";
}
for my $item (@items) {
  my ($kind, $text, $key, $before_verse) = @$item;
  if ($kind eq 'b') { $after_blank = 1; next; }
  if ($kind eq 'l') {
    if ($before_verse) {
      next if $stuck{$text} && $text eq $last_heading;
      $last_heading = $text if $after_blank;
    }
    if ($after_blank) { push @pending, $text; } else { emit($text); }
    next;
  }
  $chapter = $key;
  emit($_) for @pending;
  @pending = (); $after_blank = 0;
  emit($text) if length $text;
}
emit($_) for @pending;
close($groups) or die "cannot write $ENV{GROUPS_OUT}: $!";
PERL

# Treasury of David, diatheke -f plain: "Psalms C:V: text" with the commentary of a whole psalm
# often on one line; three or more spaces separate its paragraphs. "*" marks emphasis. A blank line
# is written between psalms.
read -r -d '' TDAVID_CLEANER <<'PERL' || true
use strict; use warnings; use utf8;
binmode STDIN, ':encoding(UTF-8)'; binmode STDOUT, ':encoding(UTF-8)';
open(my $groups, '>:encoding(UTF-8)', $ENV{GROUPS_OUT}) or die "cannot write $ENV{GROUPS_OUT}: $!";
my ($psalm, $started) = (-1, 0);
while (my $line = <STDIN>) {
  chomp $line;
  next if $line =~ /^\(TDavid\)$/;
  if ($line =~ s/^Psalms (\d+):\d+: ?//) {
    if ($started && $1 != $psalm) { print "\n"; }
    print $groups "Psalms $1\n" if !$started || $1 != $psalm;   # the group of the psalm's document
    $psalm = $1; $started = 1;
  }
  for my $par (split /\s{3,}/, $line) {
    $par =~ s/(^|\s)"\s*\*\s*/$1"/g;            # opening quote followed by an emphasis mark
    $par =~ s/\s*\*\s*"(?=\s|$|[.,;:!?])/"/g;    # emphasis mark before a closing quote
    $par =~ s/\s*\*+\s*/ /g;                     # remaining emphasis marks
    $par =~ s/[ \t]+/ /g; $par =~ s/^ //; $par =~ s/ $//;
    print "$par\n" if length $par;
  }
}
close($groups) or die "cannot write $ENV{GROUPS_OUT}: $!";
PERL

# fetch NAME MODULE KEY CLEANER [diatheke options...]
fetch() {
  local name=$1 module=$2 key=$3 cleaner=$4
  shift 4
  local dest="$out/$name.txt" groups="$out/$name.groups"
  if [[ -s "$dest" && -s "$groups" ]]; then
    echo "fetch_corpus: $dest and $groups exist, keeping them" >&2
    return
  fi
  echo "fetch_corpus: $module -> $dest, $groups" >&2
  diatheke -b "$module" -f plain "$@" -k "$key" | GROUPS_OUT="$groups.tmp" perl -e "$cleaner" >"$dest.tmp"
  local bytes
  bytes=$(stat -c %s "$dest.tmp")
  if ((bytes < 1000000)); then
    echo "fetch_corpus: $module gave only $bytes bytes; is the SWORD module installed? (diatheke -b system -k modulelist)" >&2
    rm -f "$dest.tmp"
    exit 1
  fi
  if grep -qE '^ *([IV]+ )?[A-Z][a-z]+( of)?( [A-Z][a-z]+)? [0-9]+:[0-9]+: |<[a-zA-Z/][^>]*>' "$dest.tmp"; then
    echo "fetch_corpus: $dest.tmp still holds verse references or markup; the cleaner needs updating" >&2
    exit 1
  fi
  # one group per document: documents are the blank-line separated paragraphs (awk's RS="")
  local documents names
  documents=$(awk 'BEGIN { RS = "" } END { print NR }' "$dest.tmp")
  names=$(grep -c '' "$groups.tmp")
  if ((documents != names)); then
    echo "fetch_corpus: $dest.tmp has $documents documents but $groups.tmp names $names groups; the cleaner needs updating" >&2
    exit 1
  fi
  mv -f "$dest.tmp" "$dest"
  mv -f "$groups.tmp" "$groups"
  echo "fetch_corpus: $dest: $bytes bytes, $(grep -c '' "$dest") lines, $documents documents in $(sort -u "$groups" | grep -c '') groups" >&2
}

fetch tdavid TDavid "Psalms 1:1-150:6" "$TDAVID_CLEANER"
fetch web engWEB2015eb "Gen 1:1-Rev 22:21" "$BIBLE_CLEANER" -o f
fetch kjv engKJV2006eb "Gen 1:1-Rev 22:21" "$BIBLE_CLEANER"
du -cb "$out"/{tdavid,web,kjv}.txt | tail -1 | awk '{printf "fetch_corpus: %.1f MB in total\n", $1 / 1e6}' >&2
