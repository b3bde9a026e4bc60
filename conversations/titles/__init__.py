"""Dialog titles: the pure rules and the background title service."""
