"""git_pf.image: the object model: git trees and blobs (`tree`), the image format (`manifest`),
refs under refs/pf/ (`refs`), history, the one path check and safe writer (`safepath`), layer-file
checks (`layercheck`), signing and verification. Imports only `core`, `store` and the layers' readers."""
