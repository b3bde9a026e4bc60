"""Create N users with one API token each, in bulk (run with the server's environment).

    python -m bench.load.mkusers --count 500 --prefix b1

Prints a JSON list of the raw tokens (user i owns token i) as its last stdout line. ``manage.py
createtoken`` starts Django once per user; this does it once for all, with ``bulk_create``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--prefix", default="bench")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "picobot_site.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.db import transaction

    from conversations.auth import TOKEN_PREFIX_CHARS
    from conversations.models import ApiToken

    model = get_user_model()
    names = [f"{args.prefix}-{i}" for i in range(args.count)]
    with transaction.atomic():
        users = []
        for name in names:
            user = model(username=name)
            user.set_unusable_password()
            users.append(user)
        model.objects.bulk_create(users, batch_size=1000)
        by_name = dict(model.objects.filter(username__in=names).values_list("username", "pk"))
        raws = ["pb_" + secrets.token_urlsafe(32) for _ in names]
        ApiToken.objects.bulk_create(
            [
                ApiToken(
                    user_id=by_name[name],
                    name="bench",
                    prefix=raw[:TOKEN_PREFIX_CHARS],
                    token_hash=ApiToken.hash_token(raw),
                )
                for name, raw in zip(names, raws, strict=True)
            ],
            batch_size=1000,
        )
    print(json.dumps(raws))


if __name__ == "__main__":
    main()
