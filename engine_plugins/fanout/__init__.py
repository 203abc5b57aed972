"""One server, several API processes: the link between them and the contract over all of them."""
