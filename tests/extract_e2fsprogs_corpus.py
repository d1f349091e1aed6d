"""Extract e2fsprogs' test images (tests/<test>/image, image.gz, image.bz2) from a git directory of
https://github.com/tytso/e2fsprogs into DEST/tests/<test>/, as they are (still compressed), with the
commit in DEST/COMMIT. A blob the git directory does not hold (a shallow or partial mirror) is
skipped and named; DEST is replaced only when the extraction is complete.

    python tests/extract_e2fsprogs_corpus.py GIT_DIR [DEST]     (make e2fsprogs-corpus E2FSPROGS_GIT=...)
"""

import os
import re
import shutil
import subprocess
import sys

IMAGE = re.compile(r"^tests/([A-Za-z0-9_.+-]+)/(image(?:\.gz|\.bz2)?)$")


def git(git_dir, *args):
    return subprocess.run(["git", "--git-dir=" + git_dir] + list(args), stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL)


def main(git_dir, dest=".cache/e2fsprogs"):
    commit = git(git_dir, "rev-parse", "HEAD").stdout.decode().strip()
    listing = git(git_dir, "ls-tree", "-r", "-z", "HEAD", "tests").stdout.decode().split("\0")
    staging = dest + ".new"
    shutil.rmtree(staging, ignore_errors=True)
    extracted, skipped = 0, []
    for line in filter(None, listing):
        meta, path = line.split("\t", 1)
        match = IMAGE.match(path)
        if not match:
            continue
        blob = git(git_dir, "cat-file", "blob", meta.split()[2])
        if blob.returncode != 0:
            skipped.append(path)
            continue
        folder = os.path.join(staging, "tests", match.group(1))
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, match.group(2)), "wb") as out:
            out.write(blob.stdout)
        extracted += 1
    with open(os.path.join(staging, "COMMIT"), "w") as out:
        out.write(commit + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    os.rename(staging, dest)
    print("%d images of e2fsprogs %s in %s/tests%s" % (extracted, commit, dest, "; not in the git directory, "
          "skipped: " + ", ".join(skipped) if skipped else ""))


if __name__ == "__main__":
    main(*sys.argv[1:])
